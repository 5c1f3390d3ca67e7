package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeModules lays out a /proc/modules, a /sys/module and a modprobe that
// records its arguments, prints say and exits with code.
type fakeModules struct {
	Modules
	calls string // file the fake modprobe appends its arguments to
}

func newFakeModules(t *testing.T, procModules *string, sysModules map[string]map[string]string, say string, code int) fakeModules {
	t.Helper()
	dir := t.TempDir()
	f := fakeModules{
		Modules: Modules{
			ProcModules: filepath.Join(dir, "proc-modules"),
			SysModule:   filepath.Join(dir, "sys-module"),
			Modprobe:    filepath.Join(dir, "modprobe"),
		},
		calls: filepath.Join(dir, "calls"),
	}
	if procModules != nil {
		if err := os.WriteFile(f.ProcModules, []byte(*procModules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for mod, files := range sysModules {
		d := filepath.Join(f.SysModule, mod)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	script := "#!/bin/sh\necho \"$*\" >> '" + f.calls + "'\n"
	if say != "" {
		sayFile := filepath.Join(dir, "say")
		if err := os.WriteFile(sayFile, []byte(say+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		script += "cat '" + sayFile + "' >&2\n"
	}
	script += "exit " + string(rune('0'+code)) + "\n"
	if err := os.WriteFile(f.Modprobe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f fakeModules) modprobeCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(f.calls)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func ptr(s string) *string { return &s }

const procWithIPVS = `nf_conntrack 176128 2 ip_vs,nf_nat, Live 0x0000000000000000
ip_vs_rr 12288 1 - Live 0x0000000000000000
ip_vs 204800 %s Live 0x0000000000000000
`

func TestModules(t *testing.T) {
	loaded := func(refcount, users string) *string {
		return ptr(strings.Replace(procWithIPVS, "%s", refcount+" "+users, 1))
	}
	tests := []struct {
		name        string
		unload      bool
		proc        *string // nil: no /proc/modules (a kernel without loadable modules)
		sys         map[string]map[string]string
		say         string
		code        int
		want        ModuleResult
		wantErr     string
		wantCalls   []string
		wantInWords string
	}{
		{
			name: "load: already loaded", proc: loaded("1", "ip_vs_rr,"),
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleAlreadyLoaded},
		},
		{
			name: "load: modprobe loads it", proc: ptr(""),
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleLoaded}, wantCalls: []string{"ip_vs"},
		},
		{
			name: "load: module absent is not an error", proc: ptr(""),
			say: "modprobe: FATAL: Module ip_vs not found in directory /lib/modules/6.1.0", code: 1,
			want:      ModuleResult{Name: "ip_vs", Outcome: ModuleUnavailable, Detail: "modprobe: FATAL: Module ip_vs not found in directory /lib/modules/6.1.0"},
			wantCalls: []string{"ip_vs"}, wantInWords: "ip_vs: not available on this host (modprobe: FATAL",
		},
		{
			name: "load: no permission is an error", proc: ptr(""),
			say: "modprobe: ERROR: could not insert 'ip_vs': Operation not permitted", code: 1,
			want:      ModuleResult{Name: "ip_vs"},
			wantErr:   "loading kernel module ip_vs: modprobe: exit status 1: modprobe: ERROR: could not insert 'ip_vs': Operation not permitted",
			wantCalls: []string{"ip_vs"},
		},
		{
			name: "load: built in", proc: ptr(""), sys: map[string]map[string]string{"ip_vs": {"parameters": ""}},
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleBuiltin},
		},
		{
			name: "load: kernel without modules, built in", sys: map[string]map[string]string{"ip_vs": {}},
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleBuiltin},
		},
		{
			name: "unload: refcount 0", unload: true, proc: loaded("0", "-"),
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleUnloaded}, wantCalls: []string{"-r ip_vs"},
		},
		{
			name: "unload: in use", unload: true, proc: loaded("2", "ip_vs_rr,ip_vs_wrr,"),
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleInUse, Refcount: 2}, wantInWords: "ip_vs: in use, left loaded (refcount 2)",
		},
		{
			name: "unload: not loaded", unload: true, proc: ptr("nf_conntrack 176128 0 - Live 0x0\n"),
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleNotLoaded},
		},
		{
			name: "unload: built in", unload: true, sys: map[string]map[string]string{"ip_vs": {}},
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleBuiltin},
		},
		{
			name: "unload: refcount from /sys/module", unload: true,
			sys:  map[string]map[string]string{"ip_vs": {"initstate": "live\n", "refcnt": "3\n"}},
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleInUse, Refcount: 3},
		},
		{
			name: "unload: /sys/module refcount 0", unload: true,
			sys:  map[string]map[string]string{"ip_vs": {"initstate": "live\n", "refcnt": "0\n"}},
			want: ModuleResult{Name: "ip_vs", Outcome: ModuleUnloaded}, wantCalls: []string{"-r ip_vs"},
		},
		{
			name: "unload: modprobe -r fails", unload: true, proc: loaded("0", "-"),
			say: "modprobe: FATAL: Module ip_vs is builtin.", code: 1,
			want:      ModuleResult{Name: "ip_vs"},
			wantErr:   "unloading kernel module ip_vs: modprobe: exit status 1: modprobe: FATAL: Module ip_vs is builtin.",
			wantCalls: []string{"-r ip_vs"},
		},
		{
			name: "unload: unparsable refcount", unload: true, proc: loaded("x", "-"),
			want:    ModuleResult{Name: "ip_vs"},
			wantErr: `reading the refcount of kernel module ip_vs in "ip_vs 204800 x - Live 0x0000000000000000": strconv.Atoi: parsing "x": invalid syntax`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeModules(t, tt.proc, tt.sys, tt.say, tt.code)
			var (
				got ModuleResult
				err error
			)
			if tt.unload {
				got, err = f.UnloadIfUnused(context.Background(), "ip_vs")
			} else {
				got, err = f.Load(context.Background(), "ip_vs")
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Errorf("error = %q, want %q", gotErr, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, f.modprobeCalls(t)); diff != "" {
				t.Errorf("modprobe calls (-want +got):\n%s", diff)
			}
			if tt.wantInWords != "" && !strings.Contains(got.String(), tt.wantInWords) {
				t.Errorf("String() = %q, want it to contain %q", got.String(), tt.wantInWords)
			}
		})
	}
}

// TestModulesOnThisHost runs the host's own modprobe, /proc/modules and
// /sys/module with a module name no kernel has: nothing is loaded or
// unloaded, and neither is an error.
func TestModulesOnThisHost(t *testing.T) {
	const name = "ipfailover_no_such_module"
	got, err := LoadModule(context.Background(), name)
	if err != nil {
		t.Fatalf("LoadModule: %v", err)
	}
	if got.Outcome != ModuleUnavailable {
		t.Errorf("LoadModule = %v, want %v", got, ModuleUnavailable)
	}
	got, err = UnloadModuleIfUnused(context.Background(), name)
	if err != nil {
		t.Fatalf("UnloadModuleIfUnused: %v", err)
	}
	if got.Outcome != ModuleNotLoaded {
		t.Errorf("UnloadModuleIfUnused = %v, want %v", got, ModuleNotLoaded)
	}
}

func TestModulesNoModprobe(t *testing.T) {
	m := Modules{
		ProcModules: filepath.Join(t.TempDir(), "absent"),
		SysModule:   t.TempDir(),
		Modprobe:    "ipfailover-no-such-modprobe",
	}
	got, err := m.Load(context.Background(), "ip_vs")
	if err != nil || got.Outcome != ModuleUnavailable {
		t.Errorf("Load = %v, %v; want %v, no error", got, err, ModuleUnavailable)
	}
}
