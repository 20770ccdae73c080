package harbor

import (
	"errors"
	"fmt"
	"testing"

	"github.com/compactrl/compactrl/sandbox"
)

// createBox drops the storage limit and retries once when the engine
// refuses it (sandbox.ErrStorageQuota), saying so; other failures, and a
// refusal when no storage limit was asked for, are returned as they are.
func TestCreateBoxStorageQuotaFallback(t *testing.T) {
	quota := fmt.Errorf("sandbox: %w", sandbox.ErrStorageQuota)
	other := errors.New("sandbox: podman run: exit status 125: image not known")
	for _, tc := range []struct {
		name     string
		disk     int64
		first    error
		calls    int
		wantErr  error
		wantNote bool
	}{
		{"quota refused: retried without the limit", 1 << 30, quota, 2, nil, true},
		{"other failure: not retried", 1 << 30, other, 1, other, false},
		{"quota refused without a limit asked: not retried", 0, quota, 1, quota, false},
		{"created", 1 << 30, nil, 1, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var specs []sandbox.BoxSpec
			box := &sandbox.Box{}
			create := func(s sandbox.BoxSpec) (*sandbox.Box, error) {
				specs = append(specs, s)
				if len(specs) == 1 && tc.first != nil {
					return nil, tc.first
				}
				return box, nil
			}
			got, note, err := createBox(sandbox.BoxSpec{Image: "img", StorageBytes: tc.disk}, create)
			if len(specs) != tc.calls || err != tc.wantErr || (note != "") != tc.wantNote {
				t.Fatalf("%d calls, note %q, err %v; want %d calls, note %v, err %v", len(specs), note, err, tc.calls, tc.wantNote, tc.wantErr)
			}
			if err == nil && got != box {
				t.Error("the created box was not returned")
			}
			if tc.calls == 2 && specs[1].StorageBytes != 0 {
				t.Errorf("retry kept the storage limit %d", specs[1].StorageBytes)
			}
		})
	}
}
