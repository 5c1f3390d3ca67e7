package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKeepalivedFlags(t *testing.T) {
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
		{name: "tabs", env: "-D\t-P", want: []string{"-D", "-P"}},
		{name: "newline", env: "-D\n-G", wantErr: `KEEPALIVED_OPTIONS="-D\n-G": must be one line of keepalived flags`},

		{name: "file needs quotes", sysconfig: "KEEPALIVED_OPTIONS=-D -P\n", wantErr: `/etc/sysconfig/keepalived line 1: KEEPALIVED_OPTIONS: "-D -P": quote the value`},
		{name: "file blank after =", sysconfig: "KEEPALIVED_OPTIONS= -D\n", wantErr: "quote the value"},
		{name: "file unbalanced", sysconfig: "x=1\nKEEPALIVED_OPTIONS=\"-D\n", wantErr: `/etc/sysconfig/keepalived line 2: KEEPALIVED_OPTIONS: "\"-D": unbalanced double quote`},
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
		{name: "pid", env: "--pid /tmp/k.pid", wantErr: `(--pid) is not allowed: the pid file must stay where`},
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
			got, err := keepalivedFlags(tc.env, tc.sysconfig)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("keepalivedFlags = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("keepalivedFlags (-want +got):\n%s", diff)
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
		err := checkFlags(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("checkFlags(%q) = %v, want ok %v", tc.args, err, tc.ok)
		}
	}
}

// quote quotes words for splitWords.
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
		words, err := splitWords(s, false)
		if err != nil {
			return
		}
		again, err := splitWords(quote(words), false)
		if err != nil {
			t.Fatalf("splitWords(quote(%q)) = %v", words, err)
		}
		if len(words) == 0 && len(again) == 0 {
			return
		}
		if diff := cmp.Diff(words, again); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", s, diff)
		}
		_, _ = keepalivedFlags("", "KEEPALIVED_OPTIONS="+s)
		_ = checkFlags(words)
	})
}

// TestParseNamesTheFlagsSource: Parse reports a bad KEEPALIVED_OPTIONS once,
// naming where the value came from: the variable, or the file and its line.
func TestParseNamesTheFlagsSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  Raw
		want string
	}{
		{"variable", Raw{VirtualIPs: "192.0.2.1", KeepalivedOpts: "-f /x"},
			`KEEPALIVED_OPTIONS="-f /x": "-f" (-f, --use-file) is not allowed: the configuration file is chosen by ipfailover (KEEPALIVED_CONFIG)`},
		{"file", Raw{VirtualIPs: "192.0.2.1", Sysconfig: "# options\nKEEPALIVED_OPTIONS=\"-f /x\"\n"},
			`/etc/sysconfig/keepalived line 2: KEEPALIVED_OPTIONS="-f /x": "-f" (-f, --use-file) is not allowed: the configuration file is chosen by ipfailover (KEEPALIVED_CONFIG)`},
		{"file syntax", Raw{VirtualIPs: "192.0.2.1", Sysconfig: "KEEPALIVED_OPTIONS=-D -P\n"},
			`/etc/sysconfig/keepalived line 1: KEEPALIVED_OPTIONS: "-D -P": quote the value; a shell would run the words after the first blank as a command`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.raw)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse error:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
	c, err := Parse(Raw{VirtualIPs: "192.0.2.1", Sysconfig: "KEEPALIVED_OPTIONS=\"-D\"\n"})
	if err != nil || !cmp.Equal(c.KeepalivedFlags, []string{"-D"}) {
		t.Errorf("flags from the file: %v, %v; want [-D]", c, err)
	}
}
