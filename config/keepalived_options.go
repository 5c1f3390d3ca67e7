package config

import (
	"errors"
	"fmt"
	"strings"
)

// SysconfigPath is where the shipped image reads KEEPALIVED_OPTIONS from, as
// a shell assignment (the seed Deployment mounts the host's /etc/sysconfig).
// The caller reads the file into Raw.Sysconfig.
const SysconfigPath = "/etc/sysconfig/keepalived"

// keepalivedFlags returns the extra keepalived flags from env (the value of
// KEEPALIVED_OPTIONS) or, when env is blank, from the last
// `KEEPALIVED_OPTIONS=...` line (optionally `export`ed) of sysconfig, the
// content of SysconfigPath. Its error names where the value came from: the
// variable, or the file and line.
//
// The value is split into words the way a shell splits a command line,
// without running one: blanks separate words, single quotes, double quotes
// and backslashes quote (quotes inside the value are honoured, where a shell
// expanding $KEEPALIVED_OPTIONS would pass them on literally). Anything that
// would need a shell is an error: unbalanced quotes, $ and backticks
// (expansion, command substitution), ; & | < > ( ) (lists, redirections,
// subshells), * ? [ ] { } (globs, brace expansion), ~ and # at the start of a
// word. In the file the assigned value must be one shell word, as the shell
// requires (`KEEPALIVED_OPTIONS="-D -P"`, not `KEEPALIVED_OPTIONS=-D -P`),
// and may be followed by a # comment; in the environment it must be one
// line. The flags are then checked with checkFlags.
func keepalivedFlags(env, sysconfig string) ([]string, error) {
	source, value := "KEEPALIVED_OPTIONS", env
	if strings.ContainsAny(env, "\n\r") {
		return nil, fmt.Errorf("%s=%q: must be one line of keepalived flags", source, value)
	}
	if strings.TrimSpace(env) == "" {
		var err error
		source, value, err = sysconfigOptions(sysconfig)
		if err != nil {
			return nil, err
		}
	}
	words, err := splitWords(value, false)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", source, value, err)
	}
	if err := checkFlags(words); err != nil {
		return nil, fmt.Errorf("%s=%q: %w", source, value, err)
	}
	return words, nil
}

// sysconfigOptions returns the value of the last KEEPALIVED_OPTIONS
// assignment in the sysconfig file and a name for its line.
func sysconfigOptions(file string) (source, value string, err error) {
	const name = "KEEPALIVED_OPTIONS="
	for i, line := range strings.Split(file, "\n") {
		line = strings.TrimLeft(line, " \t")
		if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			line = strings.TrimLeft(rest, " \t")
		}
		rhs, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		source = fmt.Sprintf("%s line %d: KEEPALIVED_OPTIONS", SysconfigPath, i+1)
		words, err := splitWords(strings.TrimRight(rhs, " \t\r"), true)
		if err != nil {
			return "", "", fmt.Errorf("%s: %q: %w", source, rhs, err)
		}
		switch {
		case len(words) > 1 || (len(words) == 1 && rhs != "" && (rhs[0] == ' ' || rhs[0] == '\t')):
			return "", "", fmt.Errorf("%s: %q: quote the value; a shell would run the words after the first blank as a command", source, rhs)
		case len(words) == 1:
			value = words[0]
		default:
			value = ""
		}
	}
	return source, value, nil
}

// splitWords splits s into words like a shell, without expansions (see
// keepalivedFlags for what is refused); with comments, an unquoted # at the
// start of a word ends the input, otherwise it is refused.
func splitWords(s string, comments bool) ([]string, error) {
	var (
		words  []string
		word   strings.Builder
		inWord bool
	)
	end := func() {
		if inWord {
			words = append(words, word.String())
		}
		word.Reset()
		inWord = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			end()
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unbalanced single quote")
			}
			word.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += 1 + j
		case c == '"':
			inWord = true
			closed := false
			for i++; i < len(s); i++ {
				c := s[i]
				if c == '"' {
					closed = true
					break
				}
				if c == '$' || c == '`' {
					return nil, fmt.Errorf("%q inside double quotes needs a shell (expansion); use single quotes", c)
				}
				if c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
					if s[i] != '\n' {
						word.WriteByte(s[i])
					}
					continue
				}
				word.WriteByte(c)
			}
			if !closed {
				return nil, errors.New("unbalanced double quote")
			}
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("backslash at the end")
			}
			i++
			if s[i] != '\n' {
				word.WriteByte(s[i])
				inWord = true
			}
		case c == '#' && !inWord && comments:
			end()
			return words, nil
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			return nil, errors.New(`"$(" needs a shell (command substitution)`)
		case c == '$':
			return nil, errors.New(`"$" needs a shell (expansion)`)
		case c == '`':
			return nil, errors.New("backticks need a shell (command substitution)")
		case strings.IndexByte(";&|<>()", c) >= 0:
			return nil, fmt.Errorf("%q needs a shell (command list, pipe, redirection or subshell)", c)
		case strings.IndexByte("*?[]{}", c) >= 0:
			return nil, fmt.Errorf("%q needs a shell (glob or brace expansion); quote it", c)
		case (c == '~' || c == '#') && !inWord:
			return nil, fmt.Errorf("%q at the start of a word needs a shell; quote it", c)
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	end()
	return words, nil
}

// refusal is a keepalived 2.2.7 flag refused as an extra flag, and why.
type refusal struct {
	long  string
	short byte
	why   string
}

var refused = []refusal{
	{"use-file", 'f', "the configuration file is chosen by ipfailover (KEEPALIVED_CONFIG)"},
	{"pid", 'p', "the pid file must stay where remove-failover and metrics read it"},
	{"namespace", 's', "it moves keepalived and its pid files into another network namespace"},
	{"instance", 0, "it renames keepalived's pid files"},
	{"config-test", 't', "keepalived would exit after checking the configuration"},
	{"version", 'v', "keepalived would exit after printing its version"},
	{"help", 'h', "keepalived would exit after printing its help"},
	{"signum", 0, "keepalived would exit after printing a signal number"},
	{"genhash", 'T', "it turns keepalived into the genhash utility"},
}

// keepalived 2.2.7's long options (including undocumented ones) and whether
// each requires a separate or attached value. Optional values must be
// attached (--name=value), so they count as false.
var longOptions = map[string]bool{
	"use-file": true, "vrrp": false, "check": false, "no_bfd": false, "all": false,
	"log-console": false, "log-detail": false, "log-facility": true, "no-syslog": false,
	"umask": true, "release-vips": false, "dont-release-vrrp": false, "dont-release-ipvs": false,
	"dont-respawn": false, "dont-fork": false, "dump-conf": false, "pid": true, "vrrp_pid": true,
	"genhash": false, "checkers_pid": true, "address-monitoring": false, "bfd_pid": true,
	"snmp": false, "snmp-agent-socket": true, "namespace": true, "core-dump": false,
	"core-dump-pattern": false, "all-config": false, "config-id": true, "signum": true,
	"config-test": false, "version": false, "help": false, "instance": true, "log-file": false,
	"flush-log-file": false, "no-mem-check": false, "perf": false, "debug": false,
	"ignore-sigint": false, "config-fd": true,
}

// Short options that take a value: required (attached or the next word) and
// optional (attached only).
const (
	shortWithValue    = "fSuprcbAsi"
	shortOptionalArgs = "tMg"
)

// checkFlags checks extra keepalived flags (getopt syntax: grouped short
// flags, attached or separate values, --long=value, unambiguous prefixes of
// long names). Refused, because they would break supervision:
//
//   - -f/--use-file: ipfailover chooses the configuration file;
//   - -p/--pid, -s/--namespace, --instance: they move keepalived's pid file
//     (and netns), which remove-failover and metrics rely on;
//   - -t/--config-test, -v/--version, -h/--help, --signum, -T/--genhash:
//     keepalived would exit at once, a crash loop;
//   - `--` and non-option words: keepalived takes no operands.
//
// Daemonizing cannot be asked for: keepalived forks unless told -n, and
// the supervisor always passes -n first; no flag undoes it. Unknown flags pass (the
// running keepalived judges them).
func checkFlags(args []string) error {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			return errors.New(`"--": keepalived takes no operands`)
		case strings.HasPrefix(arg, "--"):
			name, _, hasValue := strings.Cut(arg[2:], "=")
			for _, r := range refused {
				if strings.HasPrefix(r.long, name) {
					return fmt.Errorf("%q (--%s) is not allowed: %s", arg, r.long, r.why)
				}
			}
			if !hasValue && takesValue(name) {
				i++
				if i == len(args) {
					return fmt.Errorf("%q needs a value", arg)
				}
			}
		case strings.HasPrefix(arg, "-") && len(arg) > 1:
			for j := 1; j < len(arg); j++ {
				c := arg[j]
				for _, r := range refused {
					if r.short == c {
						return fmt.Errorf("%q (-%c, --%s) is not allowed: %s", arg, c, r.long, r.why)
					}
				}
				if strings.IndexByte(shortOptionalArgs, c) >= 0 {
					break // the rest of the word is the value
				}
				if strings.IndexByte(shortWithValue, c) >= 0 {
					if j == len(arg)-1 {
						i++
						if i == len(args) {
							return fmt.Errorf("%q needs a value", arg)
						}
					}
					break
				}
			}
		default:
			return fmt.Errorf("%q: keepalived takes only options", arg)
		}
	}
	return nil
}

// takesValue reports whether the long option name, or the only long option
// it abbreviates, requires a value.
func takesValue(name string) bool {
	if v, ok := longOptions[name]; ok {
		return v
	}
	match, n := "", 0
	for long := range longOptions {
		if strings.HasPrefix(long, name) {
			match, n = long, n+1
		}
	}
	return n == 1 && longOptions[match]
}
