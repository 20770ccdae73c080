package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
)

// StorageSupport is what an engine's storage can enforce, read from the
// engine's own report of its storage (`docker info`, `podman info`): the
// driver, its backing file system and the directory it stores in, and,
// for overlay, the mount options of the file system holding that
// directory (where the host can see it).
type StorageSupport struct {
	Driver    string // overlay2, overlay, btrfs, zfs, vfs, …
	BackingFS string // the driver's backing file system (extfs, xfs, …); "" when not reported
	Root      string // the engine's storage directory
	// Quota reports whether a per-container size limit (--storage-opt
	// size) can be applied; Why says why not (or that it could not be
	// told, in which case Quota is true and the engine decides).
	Quota bool
	Why   string
}

var storageCache sync.Map // engine → StorageSupport

// StorageSupport asks the engine once (per engine, per process) what its
// storage can enforce. The overlay drivers limit a container's size only
// on an XFS backing file system mounted with project quotas (pquota,
// prjquota), as Docker and podman document; btrfs, zfs and devicemapper
// do; any other driver is left to the engine.
func (c Container) StorageSupport(ctx context.Context) (StorageSupport, error) {
	if v, ok := storageCache.Load(c.engine()); ok {
		return v.(StorageSupport), nil
	}
	s, err := c.readStorage(ctx)
	if err != nil {
		return s, err
	}
	s.Quota, s.Why = judgeStorage(s, mountOptions)
	storageCache.Store(c.engine(), s)
	return s, nil
}

// readStorage reads the driver, backing file system and root from the
// engine's info: podman's JSON store section, Docker's Driver,
// DriverStatus and DockerRootDir.
func (c Container) readStorage(ctx context.Context) (StorageSupport, error) {
	if c.Name() == "podman" {
		out, err := c.run(ctx, "info", "--format", "json")
		if err != nil {
			return StorageSupport{}, err
		}
		var info struct {
			Store struct {
				GraphDriverName string            `json:"graphDriverName"`
				GraphStatus     map[string]string `json:"graphStatus"`
				GraphRoot       string            `json:"graphRoot"`
			} `json:"store"`
		}
		if err := json.Unmarshal(out, &info); err != nil {
			return StorageSupport{}, fmt.Errorf("%s info: %w", c.Name(), err)
		}
		return StorageSupport{Driver: info.Store.GraphDriverName, BackingFS: info.Store.GraphStatus["Backing Filesystem"], Root: info.Store.GraphRoot}, nil
	}
	out, err := c.run(ctx, "info", "--format", "{{json .}}")
	if err != nil {
		return StorageSupport{}, err
	}
	var info struct {
		Driver        string     `json:"Driver"`
		DriverStatus  [][]string `json:"DriverStatus"`
		DockerRootDir string     `json:"DockerRootDir"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return StorageSupport{}, fmt.Errorf("%s info: %w", c.Name(), err)
	}
	s := StorageSupport{Driver: info.Driver, Root: info.DockerRootDir}
	for _, kv := range info.DriverStatus {
		if len(kv) == 2 && kv[0] == "Backing Filesystem" {
			s.BackingFS = kv[1]
		}
	}
	return s, nil
}

// judgeStorage decides StorageSupport.Quota from what the engine reported
// and the mount options of the file system holding s.Root (opts returns
// nil when the host cannot see it).
func judgeStorage(s StorageSupport, opts func(dir string) []string) (bool, string) {
	switch s.Driver {
	case "overlay", "overlay2":
		if s.BackingFS != "xfs" {
			return false, fmt.Sprintf("the engine's %s storage limits a container's size only on an XFS backing file system with project quotas; its backing file system is %s", s.Driver, nonEmpty(s.BackingFS, "not reported"))
		}
		o := opts(s.Root)
		if o == nil {
			return true, "the mount options of " + s.Root + " cannot be read here: the engine decides"
		}
		for _, x := range o {
			if x == "pquota" || x == "prjquota" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("the engine's %s storage is on XFS, but %s is mounted without project quotas (pquota)", s.Driver, s.Root)
	case "btrfs", "zfs", "devicemapper":
		return true, ""
	}
	return true, "the " + s.Driver + " storage driver's size limits are not known here: the engine decides"
}

func nonEmpty(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// mountOptions are the mount and super options of the file system that
// holds dir, from /proc/self/mountinfo (the longest mount point that is a
// prefix of dir); nil when dir is not found there.
func mountOptions(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	best, opts := "", []string(nil)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		mp := fs[4]
		if !(dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) || len(mp) < len(best) {
			continue
		}
		sep := -1
		for i, x := range fs {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fs) {
			continue
		}
		best = mp
		opts = append(strings.Split(fs[5], ","), strings.Split(fs[sep+3], ",")...)
	}
	return opts
}
