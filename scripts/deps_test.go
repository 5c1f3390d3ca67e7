// Package scripts tests the table of external programs, deps.txt, that
// install-deps.sh installs from: it must name every program the module's Go
// code executes, so a new dependency cannot slip in unnoticed and a fresh
// machine runs make test, make demo and make bench after install-deps.sh.
package scripts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/ipfailover/ipfailover"

// resolved accounts for the executions the scan cannot name, by "file:
// expression": the programs the expression stands for (none: a binary the
// project builds, such as ipfailover or a test's own executable) and why.
var resolved = map[string]struct {
	programs []string
	why      string
}{
	"deploy/alerts_test.go: os.Getenv(…)":                                   {[]string{"promtool"}, "PROMTOOL, which make test sets"},
	"test/cmd/demo/demo.go: d.ipfailover":                                   {nil, "the ipfailover binary the demo builds"},
	"test/cmd/demo/demo.go: d.self":                                         {nil, "the demo's own executable (its TCP service)"},
	"cmd/ipfailover/main_test.go: binary":                                   {nil, "the ipfailover binary the test builds"},
	"internal/host/module.go: m.Modprobe":                                   {[]string{"modprobe"}, "Modules.Modprobe overrides modprobe, for tests"},
	"internal/host/netlink_test.go: os.Args":                                {nil, "the test binary itself, in another namespace"},
	"internal/metrics/dump.go: d.binary":                                    {[]string{"keepalived"}, "keepalived --signum=JSON"},
	"internal/metrics/metrics_test.go: os.Args":                             {nil, "the test binary as a fake keepalived"},
	"internal/proc/proc_test.go: *ast.BinaryExpr":                           {[]string{"sleep"}, "a symlink to /bin/sleep with an odd name"},
	"internal/supervisor/supervisor.go: s.opts.Binary":                      {[]string{"keepalived"}, "the supervised keepalived"},
	"internal/supervisor/supervisor_test.go: fakeBinary":                    {nil, "the fake keepalived the test builds"},
	"internal/supervisor/testdata/fakekeepalived/main.go: os.Executable(…)": {nil, "the fake keepalived forking itself"},
	"iptables/nft.go: n.Path":                                               {[]string{"nft"}, "NewNFTCmd finds nft on PATH"},
	"test/chaos/lab.go: t.o.Binary":                                         {nil, "the ipfailover binary test/cmd/chaos builds"},
	"test/chaos/lab.go: t.o.Self":                                           {nil, "test/cmd/chaos's own executable (the nodes' service)"},
	"test/bench/rollout.go: r.o.Binary":                                     {nil, "the ipfailover binary test/cmd/bench builds"},
	"test/bench/bench.go: r.o.Binary":                                       {nil, "the ipfailover binary test/cmd/bench builds"},
	"test/bench/migrate.go: r.o.Binary":                                     {nil, "the ipfailover binary test/cmd/bench builds"},
	"test/bench/flood.go: r.o.Binary":                                       {nil, "the ipfailover binary test/cmd/bench builds"},
	"test/bench/flood.go: r.o.FloodBaseline":                                {nil, "another ipfailover binary the flood rows compare (-flood-baseline)"},
	"test/bench/flood.go: r.o.Flooder":                                      {nil, "test/cmd/bench's own executable (the flooding client)"},
	"test/e2e/fleet_test.go: ipfailoverBin":                                 {nil, "the ipfailover binary the suite builds"},
	"test/dashboard/fleet_test.go: prometheusBinary(…)":                     {[]string{"prometheus"}, "PROMETHEUS, which make test sets, or prometheus on PATH"},
	"test/dashboard/fleet_test.go: r.bin":                                   {nil, "the ipfailover binary the test builds"},
	"test/e2e/harness_test.go: httpdBin":                                    {nil, "the suite's HTTP service binary"},
	"test/e2e/harness_test.go: ipfailoverBin":                               {nil, "the ipfailover binary the suite builds"},
	"scripts/deps_test.go: r.program":                                       {nil, "the programs of deps.txt, looked up for dpkg"},
	"test/lab/fleet.go: opts.Argv":                                          {nil, "FleetOptions.Argv: the ipfailover binary of the caller"},
	"test/kube/cluster.go: p.argv":                                          {[]string{"nsenter", "containerd"}, "a cluster's daemons: nsenter into a machine, then containerd or a binary make kube-bins built; or kubelab itself (the API forwarder)"},
	"test/kube/kubectl.go: filepath.Join(…)":                                {nil, "the kubectl make kube-bins builds"},
	"test/kubee2e/readme_test.go: filepath.Join(…)":                         {nil, "the kubectl make kube-bins builds"},
}

// libraries are the packages outside the module and the standard library
// that the module (tests included) imports and that import os/exec: the
// programs they run for this project, and why.
var libraries = map[string]struct {
	programs []string
	why      string
}{
	"github.com/coreos/go-iptables/iptables":                {[]string{"iptables", "ip6tables"}, "the VRRP rule"},
	"github.com/google/gnostic-models/compiler":             {nil, "runs OpenAPI extension handlers named in a document; kustomize names none"},
	"k8s.io/client-go/plugin/pkg/client/auth/exec":          {nil, "credential plugins a kubeconfig names; the in-cluster config of OPENSHIFT_HA_UNICAST_PEERS_FROM=pods names none"},
	"sigs.k8s.io/kustomize/api/internal/git":                {nil, "git for remote bases; deploy/ has none"},
	"sigs.k8s.io/kustomize/api/internal/builtins":           {nil, "exec generators; deploy/ has none"},
	"sigs.k8s.io/kustomize/api/internal/plugins/execplugin": {nil, "exec plugins, off in krusty's default options"},
	"sigs.k8s.io/kustomize/kyaml/fn/runtime/exec":           {nil, "KRM exec functions, off in krusty's default options"},
}

// kubeOnly are the directories whose Go code runs only with the test
// Kubernetes cluster (make kube-up, make kube-test, make bench's kube
// phase), whose programs may come from the "kube" group and, since
// install-deps.sh kube installs both, the "image" group.
var kubeOnly = []string{"test/kube", "test/kubee2e", "test/cmd/kubelab"}

// groupDirs are, for each group but "test", the directories whose Go code
// may run its programs: the cluster's for both (the image test is a shell
// script).
var groupDirs = map[string][]string{
	"image": kubeOnly,
	"kube":  kubeOnly,
}

// whenInstalled are the files whose Go code runs programs of the "image"
// group only when they are on PATH, doing without them otherwise, and why.
var whenInstalled = map[string]string{
	"test/bench/image.go": "the bench's image rows read the image with podman; without podman they say so",
}

type row struct {
	program, pkg, group string
	usedBy              []string
	line                int
}

func readTable(t *testing.T) map[string]row {
	t.Helper()
	data, err := os.ReadFile("deps.txt")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parseTable(data)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func parseTable(data []byte) (map[string]row, error) {
	rows := map[string]row{}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 4 {
			errs = append(errs, fmt.Errorf("deps.txt:%d: want program, package, group and at least one user, got %q", n, sc.Text()))
			continue
		}
		if f[2] != "test" && groupDirs[f[2]] == nil {
			errs = append(errs, fmt.Errorf("deps.txt:%d: group %q, want test, image or kube", n, f[2]))
		}
		if old, dup := rows[f[0]]; dup {
			errs = append(errs, fmt.Errorf("deps.txt:%d: %s already on line %d", n, f[0], old.line))
		}
		rows[f[0]] = row{program: f[0], pkg: f[1], group: f[2], usedBy: f[3:], line: n}
	}
	return rows, errors.Join(errs...)
}

var scanOnce = sync.OnceValues(func() (*Scan, error) { return scanModule("..", module) })

// scanned reads the module, once per test binary.
func scanned(t *testing.T) *Scan {
	t.Helper()
	s, err := scanOnce()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// needs maps every program the code needs to the places that need it: the
// scan's programs, the programs of resolved expressions and of libraries.
func needs(t *testing.T, s *Scan, libs map[string][]string) map[string][]Site {
	t.Helper()
	out := map[string][]Site{}
	for p, sites := range s.Programs {
		out[p] = append(out[p], sites...)
	}
	for key, sites := range s.Unresolved {
		for _, p := range resolved[key].programs {
			out[p] = append(out[p], sites...)
		}
	}
	for lib, progs := range libs {
		for _, p := range progs {
			out[p] = append(out[p], Site{Pos: lib, File: lib})
		}
	}
	return out
}

// ownBinaries are built by the project; no package installs them.
var ownBinaries = []string{"ipfailover"}

// missing lists, one line each, the programs the code runs that the table
// lacks or puts in the wrong group.
func missing(table map[string]row, need map[string][]Site) []string {
	var out []string
	for _, p := range sortedKeys(need) {
		if slices.Contains(ownBinaries, p) {
			continue
		}
		sites := need[p]
		r, ok := table[p]
		if !ok {
			out = append(out, fmt.Sprintf("%s (run at %s) has no row in scripts/deps.txt: add its Debian package", p, sites[0].Pos))
			continue
		}
		if r.group == "test" {
			continue
		}
		for _, s := range sites {
			if _, ok := whenInstalled[s.File]; ok {
				continue
			}
			if !slices.ContainsFunc(groupDirs[r.group], func(d string) bool { return strings.HasPrefix(s.File, d+"/") }) {
				out = append(out, fmt.Sprintf("%s is in group %q, but %s runs it outside %s: group test", p, r.group, s.Pos, strings.Join(groupDirs[r.group], ", ")))
				break
			}
		}
	}
	return out
}

// TestEveryProgramHasAPackage: the heart of it. A program the Go code runs
// without a row in deps.txt fails here, naming where it is run.
func TestEveryProgramHasAPackage(t *testing.T) {
	s := scanned(t)
	for _, m := range missing(readTable(t), needs(t, s, libraryPrograms(t))) {
		t.Error(m)
	}
	for key, sites := range s.Unresolved {
		if _, ok := resolved[key]; !ok {
			t.Errorf("%s runs %s, a program the scan cannot name: pass a string literal, or add %q to resolved in scripts/deps_test.go with the programs it stands for",
				sites[0].Pos, strings.TrimPrefix(key, sites[0].File+": "), key)
		}
	}
	for key := range resolved {
		if _, ok := s.Unresolved[key]; !ok {
			t.Errorf("resolved[%q] matches no execution any more: remove it", key)
		}
	}
}

// TestWhenInstalledLooksFirst: a file of whenInstalled looks each program
// of the image group it runs up on PATH first, so a machine without it
// still runs make test, make demo and make bench.
func TestWhenInstalledLooksFirst(t *testing.T) {
	table := readTable(t)
	need := needs(t, scanned(t), libraryPrograms(t))
	for file := range whenInstalled {
		data, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Errorf("whenInstalled[%q]: %v", file, err)
			continue
		}
		runs := 0
		for p, sites := range need {
			if table[p].group != "image" || !slices.ContainsFunc(sites, func(s Site) bool { return s.File == file }) {
				continue
			}
			runs++
			if !bytes.Contains(data, []byte(`exec.LookPath("`+p+`")`)) {
				t.Errorf("%s runs %s (group image) without exec.LookPath(%q) first", file, p, p)
			}
		}
		if runs == 0 {
			t.Errorf("whenInstalled[%q]: runs no program of the image group: remove it", file)
		}
	}
}

// TestMissingRowIsReported removes each row in turn from the real table and
// expects the check above to name that program, so the check cannot pass
// by accident.
func TestMissingRowIsReported(t *testing.T) {
	table := readTable(t)
	need := needs(t, scanned(t), libraryPrograms(t))
	if m := missing(table, need); len(m) > 0 {
		t.Fatalf("the table is incomplete already: %v", m)
	}
	for name, r := range table {
		if _, used := need[name]; !used {
			continue
		}
		t.Run(name, func(t *testing.T) {
			without := maps.Clone(table)
			delete(without, name)
			got := missing(without, need)
			if len(got) != 1 || !strings.HasPrefix(got[0], name+" (run at ") {
				t.Errorf("without the row for %s, missing() = %q, want one complaint naming it", name, got)
			}
			if r.group == "test" {
				imageOnlyRow := r
				imageOnlyRow.group = "image"
				without[name] = imageOnlyRow
				if got := missing(without, need); len(got) != 1 {
					t.Errorf("with %s in group image, missing() = %q, want one complaint", name, got)
				}
			}
		})
	}
}

// TestScanSeesThroughWrappers: programs run only through the lab's
// wrappers and launchers are found, each where this test knows it is. A
// scan that stopped following wrappers would fail here rather than report
// a table that is too short as complete.
func TestScanSeesThroughWrappers(t *testing.T) {
	s := scanned(t)
	tests := []struct{ program, site, how string }{
		{"sysctl", "test/lab/lab.go", "ip netns exec NS sysctl, in a [][]string of steps run by run()"},
		{"ping", "test/lab/lab_test.go", "Node.Exec → execOut → nsenter --net=… -- ping"},
		{"mount", "test/lab/node.go", "sh -c containerInit, inside nsenter"},
		{"python3", "test/lab/lab_test.go", `Node.Start → nsenter … sh -c 'exec "$@"' sh python3`},
		{"nft", "test/e2e/fleet_test.go", "Cluster.BridgeExec"},
		{"iptables", "test/cmd/demo/steps.go", "Node.Exec from another package"},
		{"keepalived", "test/lab/lab_test.go", "a command of an sh -c script"},
		{"go", "test/cmd/demo/demo.go", "a path from exec.LookPath"},
		{"true", "internal/keepalived/render.go", "keepalived's check command with the port check off, a /bin path"},
	}
	for _, tt := range tests {
		if !slices.ContainsFunc(s.Programs[tt.program], func(st Site) bool { return st.File == tt.site }) {
			t.Errorf("%s not found in %s (%s); found at %v", tt.program, tt.site, tt.how, s.Programs[tt.program])
		}
	}
	for _, w := range []string{"func test/lab lab.run", "func test/lab lab.execOut", "method test/lab lab.Exec",
		"method test/lab lab.Start", "method test/lab lab.BridgeExec"} {
		if !slices.Contains(s.Wrappers, w) {
			t.Errorf("wrapper %s not found; found %v", w, s.Wrappers)
		}
	}
}

// TestShellCommands: the programs of the scripts the tests pass to sh -c.
func TestShellCommands(t *testing.T) {
	tests := []struct {
		script string
		want   []string
	}{
		{"sleep 0.2 & exec sleep 60", []string{"sleep", "sleep"}},
		{`printf '%s' "$CONF" >/etc/k.conf && exec keepalived -n -f /etc/k.conf`, []string{"keepalived"}},
		{"trap 'exit 7' TERM\necho pid=$$\nwhile :; do sleep 0.1; done", []string{"sleep"}},
		{"set -e\nmount -t proc proc /proc\numount -l /sys 2>/dev/null || true\nexec \"$@\"", []string{"mount", "umount"}},
		{"FOO=1 BAR=2 env | grep FOO", []string{"env", "grep"}},
		{"if [ -e /x ]; then rm /x; fi", []string{"rm"}},
		{`for f in $FILES; do echo $$ >"$f"; done; exec "$@"`, nil},
	}
	for _, tt := range tests {
		if got := shellCommands(tt.script); !slices.Equal(got, tt.want) {
			t.Errorf("shellCommands(%q) = %q, want %q", tt.script, got, tt.want)
		}
	}
}

// libraryPrograms lists the programs the libraries run, checking that
// libraries lists exactly the imported packages that import os/exec.
func libraryPrograms(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test",
		"-f", `{{if not .Standard}}{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{end}}`, "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	found := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], module+"/") || f[0] == module {
			continue
		}
		if slices.Contains(f[1:], "os/exec") {
			found[f[0]] = true
		}
	}
	progs := map[string][]string{}
	for lib := range found {
		l, ok := libraries[lib]
		if !ok {
			t.Errorf("%s imports os/exec: add it to libraries in scripts/deps_test.go with the programs it runs for this project", lib)
			continue
		}
		progs[lib] = l.programs
	}
	for lib := range libraries {
		if !found[lib] {
			t.Errorf("libraries[%q]: no longer imported, or no longer imports os/exec: remove it", lib)
		}
	}
	return progs
}

// word matches w as a command word: not inside a longer name or path.
func word(w string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^\w.-])` + regexp.QuoteMeta(w) + `($|[^\w-])`)
}

// TestEveryRowIsUsed: a row stays only while something runs its program.
func TestEveryRowIsUsed(t *testing.T) {
	table := readTable(t)
	need := needs(t, scanned(t), libraryPrograms(t))
	for _, r := range table {
		for _, u := range r.usedBy {
			switch {
			case u == "go":
				if _, ok := need[r.program]; !ok {
					t.Errorf("deps.txt:%d: no Go code runs %s any more", r.line, r.program)
				}
			case strings.HasPrefix(u, "by:"):
				if _, ok := table[strings.TrimPrefix(u, "by:")]; !ok {
					t.Errorf("deps.txt:%d: %s is used by %s, which has no row", r.line, r.program, u)
				}
			default:
				data, err := os.ReadFile(filepath.Join("..", u))
				if err != nil {
					t.Errorf("deps.txt:%d: %v", r.line, err)
				} else if !word(r.program).Match(data) {
					t.Errorf("deps.txt:%d: %s does not name %s", r.line, u, r.program)
				}
			}
		}
	}
}

// TestPackagesProvidePrograms: where dpkg knows the installed program, its
// package is the row's, so install-deps.sh installs what provides it.
func TestPackagesProvidePrograms(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg: not a Debian machine")
	}
	table := readTable(t)
	cands := map[string][]string{}
	var all []string
	for _, r := range table {
		if r.pkg == "-" {
			continue
		}
		if p, err := exec.LookPath(r.program); err == nil {
			cands[r.program] = candidates(p)
			all = append(all, cands[r.program]...)
		}
	}
	// One dpkg call: it prints "pkg[, pkg]: path" for each path it knows,
	// and exits 1 when some path is unknown.
	out, _ := exec.Command("dpkg", append([]string{"-S"}, all...)...).Output()
	owners := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		pkgs, path, ok := strings.Cut(line, ": ")
		if ok && !strings.HasPrefix(pkgs, "diversion by ") {
			owners[path] = strings.Split(pkgs, ", ")
		}
	}
	checked := 0
	for _, name := range sortedKeys(cands) {
		r := table[name]
		i := slices.IndexFunc(cands[name], func(c string) bool { return owners[c] != nil })
		if i < 0 {
			t.Logf("%s: dpkg does not know %s", name, cands[name][0])
			continue
		}
		checked++
		got := owners[cands[name][i]]
		// python3's /usr/bin/python3 is python3-minimal's, which python3
		// depends on: installing the row's package installs it.
		if !slices.Contains(got, r.pkg) && !slices.ContainsFunc(got, func(o string) bool { return slices.Contains(depends(r.pkg), o) }) {
			t.Errorf("deps.txt:%d: %s is %s from package %v, which the row's %s neither is nor depends on", r.line, name, cands[name][i], got, r.pkg)
		}
	}
	if checked == 0 {
		t.Error("dpkg knew none of the programs")
	}
}

// depends lists the packages an installed package depends on directly.
func depends(pkg string) []string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Depends}, ${Pre-Depends}", pkg).Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, alt := range strings.FieldsFunc(string(out), func(r rune) bool { return r == ',' || r == '|' }) {
		if f := strings.Fields(alt); len(f) > 0 {
			name, _, _ := strings.Cut(f[0], ":")
			names = append(names, name)
		}
	}
	return names
}

// candidates are the names dpkg may know a program by: the path, where its
// symlinks lead (alternatives), and each with /usr added or removed
// (Debian's merged /usr).
func candidates(p string) []string {
	paths := []string{p}
	if target, err := filepath.EvalSymlinks(p); err == nil && target != p {
		paths = append(paths, target)
	}
	var out []string
	for _, q := range paths {
		out = append(out, q)
		if rest, ok := strings.CutPrefix(q, "/usr"); ok {
			out = append(out, rest)
		} else {
			out = append(out, "/usr"+q)
		}
	}
	return out
}
