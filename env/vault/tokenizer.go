package vault

import (
	"fmt"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/tokenizer"
)

// Default tokenizer settings: a byte-level BPE of at most DefaultVocabSize
// ids learned from Corpus(DefaultConfig(), TrainSeeds().Start, DefaultCorpusEpisodes),
// with the agent's template specials.
const (
	DefaultVocabSize      = 1024
	DefaultCorpusEpisodes = 200
)

// DefaultTokenizer trains the suite's default tokenizer (deterministic, a
// few tens of milliseconds) and returns it with its chat template.
func DefaultTokenizer() (*tokenizer.Tokenizer, agent.Template, error) {
	texts, err := Corpus(DefaultConfig(), TrainSeeds().Start, DefaultCorpusEpisodes)
	if err != nil {
		return nil, agent.Template{}, err
	}
	tok, err := tokenizer.Train(texts, DefaultVocabSize, agent.SpecialTokenNames())
	if err != nil {
		return nil, agent.Template{}, fmt.Errorf("vault tokenizer: %w", err)
	}
	tmpl, err := agent.TemplateFrom(tok.SpecialID)
	if err != nil {
		return nil, agent.Template{}, fmt.Errorf("vault tokenizer: %w", err)
	}
	return tok, tmpl, nil
}
