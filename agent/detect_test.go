package agent

import (
	"testing"
	"testing/fstest"
)

// A preset added as one file is detected by the markers in that file: no
// code names it. Priority orders a refinement (qwen3 over chatml) first.
func TestDetectionFromPresetFiles(t *testing.T) {
	fsys := fstest.MapFS{"t/mine.json": {Data: []byte(`{"name": "mine", "stop": ["<end>"], "detect": {"all": ["<begin>", "<end>"], "priority": 5}}`)}}
	ps, err := parsePresetFiles(fsys, "t")
	if err != nil {
		t.Fatal(err)
	}
	d := ps["mine"].Detect
	if d == nil || !d.matches("{{ '<begin>' + m + '<end>' }}", "", nil) || d.matches("{{ '<begin>' }}", "", nil) || d.matches("", "", nil) {
		t.Fatalf("detection %+v", d)
	}
	for _, c := range []struct{ template, eos, want string }{
		{"<|im_start|>{{ x }}<tool_response>", "", "qwen3"},
		{"<|im_start|>{{ x }}", "", "chatml"},
		{"<|start_header_id|>", "<|eot_id|>", "llama3.1"},
		{"<|start_header_id|>", "<|end_of_text|>", "llama3"},
		{"[gMASK]<sop>", "", "glm4"},
	} {
		p, err := DetectPreset(c.template, c.eos, nil)
		if err != nil || p.Name != c.want {
			t.Errorf("%q (eos %q): %s %v, want %s", c.template, c.eos, p.Name, err, c.want)
		}
	}
	gptoss := func(s string) bool { return s == "<|channel|>" }
	if p, err := DetectPreset("", "", gptoss); err != nil || p.Name != "gpt-oss" {
		t.Errorf("no template, <|channel|>: %s %v", p.Name, err)
	}
	if _, err := DetectPreset("plain {{ text }}", "", nil); err == nil {
		t.Error("a template with no preset's markers was matched")
	}
}
