package attach

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotCgroup2 means a --cgroup path is not a directory of a cgroup v2
// hierarchy.
var ErrNotCgroup2 = errors.New("not a cgroup v2 directory")

// Cgroup is a cgroup v2 to sample: its id (the inode number of its
// directory, what bpf_get_current_cgroup_id returns) and its depth below
// the hierarchy's root (the root is level 0), for
// bpf_get_current_ancestor_cgroup_id.
type Cgroup struct {
	Path  string // the directory, e.g. /sys/fs/cgroup/system.slice/ssh.service
	ID    uint64
	Level int
}

// OpenCgroup resolves a cgroup given as a directory
// (/sys/fs/cgroup/system.slice/ssh.service) or as a path below the cgroup
// v2 root (system.slice/ssh.service, as /proc/PID/cgroup writes it after
// "0::"). It returns an error wrapping ErrNotCgroup2 when the directory is
// not on a cgroup2 file system (e.g. a cgroup v1 hierarchy).
func OpenCgroup(path string) (*Cgroup, error) {
	dir := path
	if _, err := os.Stat(dir); err != nil || !filepath.IsAbs(dir) {
		root, rerr := Cgroup2Root()
		if rerr != nil {
			return nil, fmt.Errorf("cgroup %s: %w", path, rerr)
		}
		dir = filepath.Join(root, path)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		root, _ := Cgroup2Root()
		return nil, fmt.Errorf("cgroup %s: %w (cgroup v2 is mounted at %q)", path, ErrNotCgroup2, root)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root, err := cgroup2Mount(abs)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	rel := strings.Trim(strings.TrimPrefix(abs, root), "/")
	level := 0
	if rel != "" {
		level = strings.Count(rel, "/") + 1
	}
	return &Cgroup{Path: abs, ID: st.Ino, Level: level}, nil
}

// Cgroup2Root returns the mount point of the cgroup v2 hierarchy from
// /proc/self/mountinfo: /sys/fs/cgroup on unified systems,
// /sys/fs/cgroup/unified on hybrid ones. The error wraps ErrNotCgroup2
// when no cgroup2 file system is mounted.
func Cgroup2Root() (string, error) {
	mounts, err := cgroup2Mounts()
	if err != nil {
		return "", err
	}
	if len(mounts) == 0 {
		return "", fmt.Errorf("%w: no cgroup2 file system is mounted", ErrNotCgroup2)
	}
	return mounts[0], nil
}

// cgroup2Mounts lists the mount points of cgroup2 file systems, in
// /proc/self/mountinfo order.
func cgroup2Mounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 0:30 / /sys/fs/cgroup rw,... shared:9 - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if ok && len(fields) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			mounts = append(mounts, fields[4])
		}
	}
	return mounts, sc.Err()
}

// cgroup2Mount returns the mount point of the cgroup2 file system that
// holds dir: the longest cgroup2 mount point in /proc/self/mountinfo that
// is a prefix of dir.
func cgroup2Mount(dir string) (string, error) {
	mounts, err := cgroup2Mounts()
	if err != nil {
		return "", err
	}
	best := ""
	for _, mp := range mounts {
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return "", fmt.Errorf("%w: no cgroup2 mount holds %s", ErrNotCgroup2, dir)
	}
	return best, nil
}

// CgroupNames names cgroup v2 ids (Sample.CgroupID) by their path below
// the cgroup2 mount, e.g. "/system.slice/ssh.service", walking the cgroup2
// tree under Cgroup2Root. An unknown id triggers a new walk at most once a
// second (cgroups come and go); ids still unknown after that are named "".
// Not safe for concurrent use.
type CgroupNames struct {
	root     string
	names    map[uint64]string
	lastWalk time.Time
}

// NewCgroupNames finds the cgroup2 mount; the error wraps ErrNotCgroup2
// when there is none.
func NewCgroupNames() (*CgroupNames, error) {
	root, err := Cgroup2Root()
	if err != nil {
		return nil, err
	}
	return &CgroupNames{root: root, names: map[uint64]string{}}, nil
}

// Name returns the path of cgroup id, "/" for the root, "" when unknown.
func (c *CgroupNames) Name(id uint64) string {
	if name, ok := c.names[id]; ok {
		return name
	}
	if time.Since(c.lastWalk) >= time.Second {
		c.walk()
		if name, ok := c.names[id]; ok {
			return name
		}
	}
	c.names[id] = "" // until the next walk finds it
	return ""
}

func (c *CgroupNames) walk() {
	c.lastWalk = time.Now()
	filepath.WalkDir(c.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil {
			rel := strings.TrimPrefix(path, c.root)
			if rel == "" {
				rel = "/"
			}
			c.names[st.Ino] = rel
		}
		return nil
	})
}
