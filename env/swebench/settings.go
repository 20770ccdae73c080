package swebench

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/compactrl/compactrl/env/tasks"
)

// SWE-bench's own settings: where the local-repository mode finds its
// repositories, and which images container mode runs.
const (
	settingRepos     = "repos"
	settingImageMap  = "image-map"
	settingNamespace = "swebench-namespace"
)

func init() {
	tasks.RegisterSettings("swebench", nil,
		tasks.Setting{Name: settingRepos, Usage: "SWE-bench: directory of local git repositories (<owner>__<name>, <owner>/<name> or <name>)"},
		tasks.Setting{Name: settingImageMap, Usage: "SWE-bench with docker/podman: JSON file of {\"instance_id\": \"image\"} overriding the instance images (default: the row's image column, then the harness's names)"},
		tasks.Setting{Name: settingNamespace, Default: DefaultNamespace, Usage: "SWE-bench with docker/podman: namespace of the harness's image names (\"none\": its local build names)"},
	)
}

// imageMap reads --image-map's file: instance id → image (none when the
// setting is empty).
func imageMap(s tasks.Settings) (map[string]string, error) {
	path := s.Get(settingImageMap)
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", settingImageMap, err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("--%s %s: want a JSON object of instance id to image: %w", settingImageMap, path, err)
	}
	return m, nil
}
