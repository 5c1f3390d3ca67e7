package supervisor

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExtraFlags(t *testing.T) {
	const rhel = `# Options for keepalived. See ` + "`keepalived --help'" + ` output and keepalived(8) and
# keepalived.conf(5) man pages for a list of all options. Here are the most
# common ones :
#
# --vrrp               -P    Only run with VRRP subsystem.
KEEPALIVED_OPTIONS="-D"
`
	for _, tc := range []struct {
		name      string
		env       string
		sysconfig string
		want      []string
		wantErr   string
	}{
		{name: "nothing", want: nil},
		{name: "env", env: "-D -P", want: []string{"-D", "-P"}},
		{name: "env wins over file", env: "-P", sysconfig: rhel, want: []string{"-P"}},
		{name: "blank env falls back to file", env: "  ", sysconfig: rhel, want: []string{"-D"}},
		{name: "RHEL file", sysconfig: rhel, want: []string{"-D"}},
		{name: "last assignment wins", sysconfig: "KEEPALIVED_OPTIONS=\"-D\"\nKEEPALIVED_OPTIONS='-D -d -S 0'\n", want: []string{"-D", "-d", "-S", "0"}},
		{name: "export and comment", sysconfig: "  export KEEPALIVED_OPTIONS=\"-D --log-facility=local1\"   # syslog\n", want: []string{"-D", "--log-facility=local1"}},
		{name: "unquoted single word", sysconfig: "KEEPALIVED_OPTIONS=-D\n", want: []string{"-D"}},
		{name: "empty assignment", sysconfig: "KEEPALIVED_OPTIONS=\n", want: nil},
		{name: "CRLF file", sysconfig: "KEEPALIVED_OPTIONS=\"-D -P\"\r\n", want: []string{"-D", "-P"}},
		{name: "other lines ignored", sysconfig: "FOO=$(reboot)\nKEEPALIVED_OPTIONS=\"-D\"\n", want: []string{"-D"}},
		{name: "quotes in value", env: `-D --config-id 'node one' -i "a\"b"`, want: []string{"-D", "--config-id", "node one", "-i", `a"b`}},
		{name: "tabs and newlines", env: "-D\t-P\n-G", want: []string{"-D", "-P", "-G"}},

		{name: "file needs quotes", sysconfig: "KEEPALIVED_OPTIONS=-D -P\n", wantErr: `sysconfig line 1: KEEPALIVED_OPTIONS: "-D -P": quote the value`},
		{name: "file blank after =", sysconfig: "KEEPALIVED_OPTIONS= -D\n", wantErr: "quote the value"},
		{name: "file unbalanced", sysconfig: "x=1\nKEEPALIVED_OPTIONS=\"-D\n", wantErr: `sysconfig line 2: KEEPALIVED_OPTIONS: "\"-D": unbalanced double quote`},
		{name: "file command substitution", sysconfig: "KEEPALIVED_OPTIONS=\"$(id)\"\n", wantErr: "needs a shell"},
		{name: "command substitution", env: "-D $(reboot)", wantErr: `KEEPALIVED_OPTIONS="-D $(reboot)": "$(" needs a shell (command substitution)`},
		{name: "variable", env: "-D $HOME", wantErr: `"$" needs a shell (expansion)`},
		{name: "backticks", env: "-D `id`", wantErr: "backticks need a shell"},
		{name: "semicolon", env: "-D; reboot", wantErr: `';' needs a shell`},
		{name: "pipe", env: "-D | tee", wantErr: `'|' needs a shell`},
		{name: "redirect", env: "-D >/tmp/x", wantErr: `'>' needs a shell`},
		{name: "glob", env: "-D -f /etc/*.conf", wantErr: `'*' needs a shell (glob`},
		{name: "unbalanced single", env: "-D 'x", wantErr: "unbalanced single quote"},
		{name: "dollar in double quotes", env: `-i "$x"`, wantErr: "inside double quotes needs a shell"},
		{name: "tilde", env: "-g ~/log", wantErr: `'~' at the start of a word`},
		{name: "use-file", env: "-D -f /tmp/other.conf", wantErr: `"-f" (-f, --use-file) is not allowed: the configuration file is chosen`},
		{name: "grouped f", env: "-Df/tmp/x", wantErr: `"-Df/tmp/x" (-f, --use-file) is not allowed`},
		{name: "use-file long", env: "--use-file=/tmp/x", wantErr: `"--use-file=/tmp/x" (--use-file) is not allowed`},
		{name: "use-file abbreviated", env: "--use /tmp/x", wantErr: `(--use-file) is not allowed`},
		{name: "pid", env: "--pid /tmp/k.pid", wantErr: `(--pid) is not allowed: the pid file must stay /run/keepalived.pid`},
		{name: "namespace", env: "-s blue", wantErr: "(-s, --namespace) is not allowed"},
		{name: "config test", env: "-t", wantErr: "keepalived would exit after checking"},
		{name: "version", env: "--version", wantErr: "(--version) is not allowed"},
		{name: "signum", env: "--signum=JSON", wantErr: "(--signum) is not allowed"},
		{name: "operand", env: "-D extra", wantErr: `"extra": keepalived takes only options`},
		{name: "double dash", env: "-D --", wantErr: `"--": keepalived takes no operands`},
		{name: "missing value", env: "-D -S", wantErr: `"-S" needs a value`},
		{name: "missing long value", env: "--log-facility", wantErr: `"--log-facility" needs a value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtraFlags(tc.env, tc.sysconfig)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ExtraFlags = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ExtraFlags (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckFlagsValues(t *testing.T) {
	// Values of flags are not flags: "-S f" and "--config-id -f" are fine,
	// and "-pD" is -p with value "D".
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"-S", "f"}, true},
		{[]string{"-Sf"}, true},
		{[]string{"--config-id", "-f"}, true},
		{[]string{"-i", "-f"}, true},
		{[]string{"-M-f"}, true},
		{[]string{"-DPCBGXVIRnld", "-a", "-x", "-m", "-e", "--all", "--dont-fork", "--log-console"}, true},
		{[]string{"-u", "022", "-A", "/run/agentx", "-r", "/run/vrrp.pid", "-c", "/run/c.pid", "-b", "/run/b.pid"}, true},
		{[]string{"-pD"}, false},
		{[]string{"-DRp", "x"}, false},
		{[]string{"-S", "0", "-f", "x"}, false},
		{[]string{"--inst=a"}, false},
		{[]string{"--genhash"}, false},
		{[]string{"-T"}, false},
		{[]string{"-h"}, false},
	} {
		err := CheckFlags(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("CheckFlags(%q) = %v, want ok %v", tc.args, err, tc.ok)
		}
	}
}

func TestArgs(t *testing.T) {
	got := Args("/etc/keepalived/keepalived.conf", []string{"-D"})
	want := []string{"-n", "--log-console", "-f", "/etc/keepalived/keepalived.conf", "-D"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Args (-want +got):\n%s", diff)
	}
}

// quote quotes words for SplitWords.
func quote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func FuzzSplitWords(f *testing.F) {
	for _, s := range []string{"-D -P", `-i "a b" 'c'`, `a\ b`, "$(x)", "'", `"\$"`, "#x", "a#b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := SplitWords(s)
		if err != nil {
			return
		}
		again, err := SplitWords(quote(words))
		if err != nil {
			t.Fatalf("SplitWords(quote(%q)) = %v", words, err)
		}
		if len(words) == 0 && len(again) == 0 {
			return
		}
		if diff := cmp.Diff(words, again); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", s, diff)
		}
		_, _ = ExtraFlags("", "KEEPALIVED_OPTIONS="+s)
		_ = CheckFlags(words)
	})
}

func TestLoadExtraFlags(t *testing.T) {
	path := t.TempDir() + "/keepalived"
	if err := os.WriteFile(path, []byte("KEEPALIVED_OPTIONS=\"-D -f /x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KEEPALIVED_OPTIONS", "")
	if _, err := LoadExtraFlags(path); err == nil || !strings.HasPrefix(err.Error(), path+": sysconfig line 1") {
		t.Errorf("LoadExtraFlags = %v, want an error naming %s line 1", err, path)
	}
	t.Setenv("KEEPALIVED_OPTIONS", "-P")
	got, err := LoadExtraFlags(path)
	if diff := cmp.Diff([]string{"-P"}, got); err != nil || diff != "" {
		t.Errorf("LoadExtraFlags = %v (-want +got):\n%s", err, diff)
	}
	t.Setenv("KEEPALIVED_OPTIONS", "")
	if got, err := LoadExtraFlags(path + ".missing"); err != nil || got != nil {
		t.Errorf("LoadExtraFlags(missing file) = %q, %v; want nothing", got, err)
	}
}
