package recipe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/model"
)

func TestPhaseLossesAreTheMeanOfTheLastSteps(t *testing.T) {
	in := `{"phase":"copy","step":0,"loss":4}
{"phase":"copy","step":1,"loss":2}
{"phase":"copy","step":2,"loss":1}
{"phase":"sft","step":0,"loss":0.5,"recall_loss":0.25}
`
	got, err := phaseLosses(strings.NewReader(in), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got["copy"] != 1.5 || got["sft"] != 0.5 || got["sft-recall"] != 0.25 {
		t.Errorf("phase losses %v, want copy 1.5 (last 2), sft 0.5, sft-recall 0.25", got)
	}
	if _, err := phaseLosses(strings.NewReader("{\n"), 2); err == nil {
		t.Error("a broken curve gave no error")
	}
}

func TestFromBaseTakesTheBasesModelAndRefusesAnotherSetting(t *testing.T) {
	dir := t.TempDir()
	y, _ := PretrainConfig().YAML()
	if err := os.WriteFile(filepath.Join(dir, BaseConfigFile), y, 0o644); err != nil {
		t.Fatal(err)
	}
	if isBase(dir) {
		t.Error("a directory without weights is no base")
	}
	if err := os.WriteFile(filepath.Join(dir, model.WeightsFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !isBase(dir) {
		t.Error("recipe and weights make a base")
	}
	rlCfg := DemoConfig()
	rlCfg.Model.Dim = 999 // the base decides the model
	c, err := FromBase(dir, rlCfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model.Init != dir || c.Model.Dim != 64 || c.Model.Tokenizer != filepath.Join(dir, TokenizerFile) || c.SFT.Steps+c.SFT.CopySteps+c.SFT.RecallSteps+c.SFT.RecallMix != 0 || c.Run != rlCfg.Run {
		t.Errorf("FromBase: model %+v sft %+v run %+v", c.Model, c.SFT, c.Run)
	}
	other := DemoConfig()
	other.Agent.Context = 768
	if _, err := FromBase(dir, other); err == nil || !strings.Contains(err.Error(), "window 512") {
		t.Errorf("another window: %v", err)
	}
	if _, err := FromBase(t.TempDir(), DemoConfig()); err == nil || !strings.Contains(err.Error(), BaseConfigFile) {
		t.Errorf("no recipe: %v", err)
	}
}
