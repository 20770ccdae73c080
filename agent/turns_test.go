package agent

import (
	"reflect"
	"testing"

	"github.com/compactrl/compactrl/tokenizer"
)

// TestChatFormatTurns cuts the agent's own layout of a conversation back
// into its turns: closed turns with their contents, the generation prompt
// as an open assistant turn, a partly written turn open with its text.
func TestChatFormatTurns(t *testing.T) {
	tok, err := tokenizer.Train([]string{"You search a vault. task: report the values of oak. open 1 file 1 has 2 pages\n"}, 320, []string{"<|im_start|>", "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewChatFormat(Presets()["chatml"], tok)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "system", Content: "You search a vault."}, {Role: "user", Content: "task: report the values of oak."},
		{Role: "assistant", Content: "open 1"}, {Role: "user", Content: "file 1 has 2 pages"}}
	ids, err := f.Render(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []ChatTurn{{Role: "system", Content: "You search a vault."}, {Role: "user", Content: "task: report the values of oak."},
		{Role: "assistant", Content: "open 1"}, {Role: "user", Content: "file 1 has 2 pages"}, {Role: "assistant", Open: true}}
	if got := f.Turns(ids); !reflect.DeepEqual(got, want) {
		t.Fatalf("turns\n got %#v\nwant %#v", got, want)
	}
	// An action sampled with its stop token, then AfterStop, as the loop writes it.
	ids = append(append(ids, tok.Encode("read 1 1")...), f.Stop()[0])
	ids = append(ids, f.Close(true)...)
	ids = append(ids, f.Observation(tok.Encode("record oak 17"))...)
	ids = append(ids, f.Action()...)
	ids = append(ids, tok.Encode("answer o")...)
	got := f.Turns(ids)
	if n := len(got); n != 7 || got[4] != (ChatTurn{Role: "assistant", Content: "read 1 1"}) || got[5] != (ChatTurn{Role: "user", Content: "record oak 17"}) || got[6] != (ChatTurn{Role: "assistant", Content: "answer o", Open: true}) {
		t.Fatalf("after a sampled action: %#v", got)
	}
}
