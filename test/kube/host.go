package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Every kubelet sets a few global sysctls at start (what Kubernetes
// expects of a node: overcommit, panic on oops, reboot after a panic, key
// quotas). The host is every cluster's, and several may be up at once
// (other worktrees): the first cluster up saves the values it found, the
// last one down puts them back. Clusters register in registryDir, under a
// lock on /run.

// kubeletSysctls are the sysctls the kubelet sets (setupKernelTunables).
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// registryDir holds one empty file per cluster up on this host and, while
// any is, the sysctls as they were before the first.
const registryDir = "/run/ipfailover-kube"

const savedSysctls = "sysctls.json"

// locked runs fn holding an exclusive lock on /run, which every cluster's
// registration takes.
func locked(fn func() error) error {
	f, err := os.Open("/run")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking /run: %w", err)
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	return fn()
}

// register records the cluster; the first saves the sysctls.
func register(name string) error {
	return locked(func() error {
		if err := os.MkdirAll(registryDir, 0o755); err != nil {
			return err
		}
		saved := filepath.Join(registryDir, savedSysctls)
		if _, err := os.Stat(saved); errors.Is(err, fs.ErrNotExist) {
			values := map[string]string{}
			for _, s := range kubeletSysctls {
				v, err := os.ReadFile("/proc/sys/" + s)
				if err != nil {
					return err
				}
				values[s] = strings.TrimSpace(string(v))
			}
			data, err := json.MarshalIndent(values, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(saved, data, 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(registryDir, name), nil, 0o644)
	})
}

// unregister forgets the cluster; the last restores the sysctls and
// removes the registry.
func unregister(name string) error {
	return locked(func() error {
		if err := os.Remove(filepath.Join(registryDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		entries, err := os.ReadDir(registryDir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() != savedSysctls {
				return nil // another cluster is up
			}
		}
		saved := filepath.Join(registryDir, savedSysctls)
		data, err := os.ReadFile(saved)
		if err == nil {
			var values map[string]string
			if err := json.Unmarshal(data, &values); err != nil {
				return fmt.Errorf("%s: %w", saved, err)
			}
			for s, v := range values {
				if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
					return fmt.Errorf("restoring %s: %w", s, err)
				}
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return os.RemoveAll(registryDir)
	})
}
