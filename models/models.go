// Package models ships the pretrained base policy of the built-in vault
// suite (docs/design.md §8), embedded in the binary so that `compactrl demo`
// runs anywhere without a pretraining phase. vault-base/ is a base policy
// directory written by `compactrl pretrain` (its README.md is the model
// card: command, commit, wall time, held-out metrics); WriteVaultBase
// copies it out for recipe.FromBase and `compactrl eval checkpoint`.
package models

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed vault-base
var vaultBase embed.FS

// VaultBaseName is the shipped base's directory under models/.
const VaultBaseName = "vault-base"

// WriteVaultBase writes the shipped base policy directory's files into dir.
func WriteVaultBase(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s base: %w", VaultBaseName, err)
	}
	return fs.WalkDir(vaultBase, VaultBaseName, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := vaultBase.ReadFile(p)
		if err != nil {
			return fmt.Errorf("write %s base: %w", VaultBaseName, err)
		}
		rel, err := filepath.Rel(VaultBaseName, p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
			return fmt.Errorf("write %s base: %w", VaultBaseName, err)
		}
		return nil
	})
}
