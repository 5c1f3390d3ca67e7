package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Modules loads and unloads kernel modules with modprobe, best effort. The
// zero value reads the host's /proc/modules and /sys/module and runs the
// modprobe found on PATH; tests point the fields elsewhere.
type Modules struct {
	ProcModules string // default /proc/modules
	SysModule   string // default /sys/module
	Modprobe    string // default "modprobe"
}

// ModuleOutcome says what Load or UnloadIfUnused found or did.
type ModuleOutcome int

// The outcomes of Load and UnloadIfUnused.
const (
	ModuleLoaded        ModuleOutcome = iota + 1 // modprobe loaded it
	ModuleAlreadyLoaded                          // it was loaded before
	ModuleBuiltin                                // built into the kernel: nothing to load or unload
	ModuleUnavailable                            // no such module on this host: not an error
	ModuleUnloaded                               // modprobe -r unloaded it
	ModuleInUse                                  // loaded and in use, left alone
	ModuleNotLoaded                              // not loaded: nothing to unload
)

func (o ModuleOutcome) String() string {
	switch o {
	case ModuleLoaded:
		return "loaded"
	case ModuleAlreadyLoaded:
		return "already loaded"
	case ModuleBuiltin:
		return "built into the kernel"
	case ModuleUnavailable:
		return "not available on this host"
	case ModuleUnloaded:
		return "unloaded"
	case ModuleInUse:
		return "in use, left loaded"
	case ModuleNotLoaded:
		return "not loaded"
	}
	return fmt.Sprintf("ModuleOutcome(%d)", int(o))
}

// ModuleResult reports what happened to a module.
type ModuleResult struct {
	Name     string
	Outcome  ModuleOutcome
	Refcount int    // the users the kernel counts, for ModuleInUse
	Detail   string // modprobe's own words, for ModuleUnavailable
}

func (r ModuleResult) String() string {
	s := r.Name + ": " + r.Outcome.String()
	if r.Outcome == ModuleInUse {
		if r.Refcount < 0 {
			s += " (it cannot be unloaded)"
		} else {
			s += fmt.Sprintf(" (refcount %d)", r.Refcount)
		}
	}
	if r.Detail != "" {
		s += " (" + r.Detail + ")"
	}
	return s
}

// LoadModule loads name with the host's modprobe; see Modules.Load.
func LoadModule(ctx context.Context, name string) (ModuleResult, error) {
	return Modules{}.Load(ctx, name)
}

// UnloadModuleIfUnused unloads name with the host's modprobe when nothing
// uses it; see Modules.UnloadIfUnused.
func UnloadModuleIfUnused(ctx context.Context, name string) (ModuleResult, error) {
	return Modules{}.UnloadIfUnused(ctx, name)
}

// Load runs `modprobe name` unless the module is loaded or built in. A module
// this host does not have (or no modprobe at all) is reported as
// ModuleUnavailable, not as an error; any other modprobe failure, such as
// a container without CAP_SYS_MODULE, is an error.
func (m Modules) Load(ctx context.Context, name string) (ModuleResult, error) {
	res := ModuleResult{Name: name}
	st, err := m.state(name)
	if err != nil {
		return res, err
	}
	switch {
	case st.builtin:
		res.Outcome = ModuleBuiltin
		return res, nil
	case st.loaded:
		res.Outcome = ModuleAlreadyLoaded
		return res, nil
	}
	out, err := m.modprobe(ctx, name)
	switch {
	case err == nil:
		res.Outcome = ModuleLoaded
		return res, nil
	case errors.Is(err, exec.ErrNotFound):
		res.Outcome, res.Detail = ModuleUnavailable, "no modprobe on this host"
		return res, nil
	case strings.Contains(out, "not found"):
		res.Outcome, res.Detail = ModuleUnavailable, out
		return res, nil
	}
	return res, fmt.Errorf("loading kernel module %s: %w", name, modprobeError(err, out))
}

// UnloadIfUnused runs `modprobe -r name` only when the module is loaded and
// the kernel counts no users of it (the refcount column of /proc/modules, or
// /sys/module/NAME/refcnt). A module in use, built in or not loaded is left
// alone and reported, not an error.
func (m Modules) UnloadIfUnused(ctx context.Context, name string) (ModuleResult, error) {
	res := ModuleResult{Name: name}
	st, err := m.state(name)
	if err != nil {
		return res, err
	}
	switch {
	case st.builtin:
		res.Outcome = ModuleBuiltin
		return res, nil
	case !st.loaded:
		res.Outcome = ModuleNotLoaded
		return res, nil
	case st.refcount != 0:
		res.Outcome, res.Refcount = ModuleInUse, st.refcount
		return res, nil
	}
	out, err := m.modprobe(ctx, "-r", name)
	if err == nil {
		res.Outcome = ModuleUnloaded
		return res, nil
	}
	// Someone may have started using it since the refcount was read.
	if st, serr := m.state(name); serr == nil && st.loaded && st.refcount != 0 {
		res.Outcome, res.Refcount = ModuleInUse, st.refcount
		return res, nil
	}
	return res, fmt.Errorf("unloading kernel module %s: %w", name, modprobeError(err, out))
}

func (m Modules) modprobe(ctx context.Context, args ...string) (string, error) {
	bin := m.Modprobe
	if bin == "" {
		bin = "modprobe"
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func modprobeError(err error, out string) error {
	if out == "" {
		return fmt.Errorf("modprobe: %w", err)
	}
	return fmt.Errorf("modprobe: %w: %s", err, out)
}

type moduleState struct {
	loaded   bool
	builtin  bool
	refcount int // -1 when the kernel does not count (the module cannot be unloaded)
}

// state finds name in /proc/modules, and in /sys/module when /proc/modules
// does not exist (a kernel without loadable modules) or does not list it (a
// built-in module has a /sys/module entry without initstate).
func (m Modules) state(name string) (moduleState, error) {
	name = strings.ReplaceAll(name, "-", "_")
	proc := m.ProcModules
	if proc == "" {
		proc = "/proc/modules"
	}
	sys := m.SysModule
	if sys == "" {
		sys = "/sys/module"
	}
	data, err := os.ReadFile(proc)
	switch {
	case err == nil:
		if st, ok, err := parseProcModules(data, name); err != nil || ok {
			return st, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return moduleState{}, fmt.Errorf("reading the loaded kernel modules: %w", err)
	}

	dir := filepath.Join(sys, name)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return moduleState{}, nil
		}
		return moduleState{}, fmt.Errorf("looking for kernel module %s: %w", name, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "initstate")); errors.Is(err, fs.ErrNotExist) {
		return moduleState{builtin: true}, nil
	}
	st := moduleState{loaded: true, refcount: -1}
	if b, err := os.ReadFile(filepath.Join(dir, "refcnt")); err == nil {
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return moduleState{}, fmt.Errorf("reading the refcount of kernel module %s: %q: %w", name, b, err)
		}
		st.refcount = n
	}
	return st, nil
}

// parseProcModules finds name in /proc/modules, whose lines read
// "ip_vs 204800 2 ip_vs_rr, Live 0x0000000000000000".
func parseProcModules(data []byte, name string) (moduleState, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != name {
			continue
		}
		if f[2] == "-" {
			return moduleState{loaded: true, refcount: -1}, true, nil
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return moduleState{}, false, fmt.Errorf("reading the refcount of kernel module %s in %q: %w", name, sc.Text(), err)
		}
		return moduleState{loaded: true, refcount: n}, true, nil
	}
	return moduleState{}, false, sc.Err()
}
