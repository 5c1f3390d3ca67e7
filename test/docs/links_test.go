// Package docs_test checks the Markdown the repository tracks: every
// relative link names a tracked file or directory, and every #anchor a
// heading of its page, as GitHub makes anchors from headings. Links to
// other sites are not fetched.
package docs_test

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/test/repo"
)

// TestLinks: every relative link and anchor of every tracked Markdown file
// resolves.
func TestLinks(t *testing.T) {
	root, files := tracked(t)
	problems, checked := checkLinks(os.DirFS(root), files)
	for _, p := range problems {
		t.Error(p)
	}
	if checked == 0 {
		t.Error("no relative link found: the scan is broken")
	}
	t.Logf("%d relative links and anchors checked", checked)
	if t.Failed() {
		t.Log("a link is relative to its file's directory and names a tracked file or directory; " +
			"an anchor is the GitHub slug of a heading of the target page: lower case, " +
			"punctuation dropped, spaces as '-', a repeated heading's slug followed by -1, -2, ...")
	}
}

// TestLinksCatchBreakage: a small tree whose links resolve (code blocks,
// code spans and comments hold none) passes; a file removed, a heading
// renamed on another page or its own, and a link broken each fail, naming
// the file, the line and the link.
func TestLinksCatchBreakage(t *testing.T) {
	good := map[string]string{
		"README.md": "# Project\n\nSee [the docs](docs/guide.md#set-it-up), [the code](cmd/), [a file](cmd/main.go),\n" +
			"[below](#more-about-it), [again](#more-about-it-1), [away](https://example.com/x#y) and\n" +
			"[an `option`](docs/guide.md#the-option_name-setting).\n\n" +
			"```\n[not a link](missing.md)\n```\n\n`[not a link either](missing.md)`\n\n" +
			"<!-- [commented out](missing.md) -->\n\n" +
			"## More about it\n\n## More about it\n",
		"docs/guide.md": "# Guide\n\n## Set it up!\n\nBack to the [project](../README.md#project).\n\n" +
			"### The `OPTION_NAME` setting\n",
		"cmd/main.go": "package main\n",
	}
	for _, tt := range []struct {
		name   string
		change func(map[string]string)
		want   []string
	}{
		{name: "intact"},
		{
			name:   "missing file",
			change: func(m map[string]string) { delete(m, "cmd/main.go") },
			want:   []string{`README.md:3: "cmd/main.go": not a tracked file or directory`, `README.md:3: "cmd/": not a tracked file or directory`},
		},
		{
			name: "renamed heading",
			change: func(m map[string]string) {
				m["docs/guide.md"] = strings.Replace(m["docs/guide.md"], "## Set it up!", "## Setting it up", 1)
			},
			want: []string{`README.md:3: "docs/guide.md#set-it-up": docs/guide.md has no heading with the anchor set-it-up`},
		},
		{
			name: "own heading",
			change: func(m map[string]string) {
				m["README.md"] = strings.Replace(m["README.md"], "## More about it\n\n## More", "## More about it\n\n## Still more", 1)
			},
			want: []string{`README.md:4: "#more-about-it-1": README.md has no heading with the anchor more-about-it-1`},
		},
		{
			name: "broken link",
			change: func(m map[string]string) {
				m["docs/guide.md"] = strings.Replace(m["docs/guide.md"], "../README.md", "README.md", 1)
			},
			want: []string{`docs/guide.md:5: "README.md#project": not a tracked file or directory`},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tree := map[string]string{}
			for k, v := range good {
				tree[k] = v
			}
			if tt.change != nil {
				tt.change(tree)
			}
			dir := t.TempDir()
			var files []string
			for name, text := range tree {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				files = append(files, name)
			}
			got, _ := checkLinks(os.DirFS(dir), files)
			slices.Sort(got)
			slices.Sort(tt.want)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSlug(t *testing.T) {
	for _, tt := range []struct{ heading, want string }{
		{"Settings", "settings"},
		{"Split brain: duplicate, stray and foreign", "split-brain-duplicate-stray-and-foreign"},
		{"keepalived's own options", "keepaliveds-own-options"},
		{"Without a registry: `make image`", "without-a-registry-make-image"},
		{"`OPENSHIFT_HA_CHECK_INTERVAL` and the check", "openshift_ha_check_interval-and-the-check"},
		{"IPFailoverVIPNoHolder", "ipfailovervipnoholder"},
		{"Move from multicast to unicast", "move-from-multicast-to-unicast"},
		{"The [built-in](x.md) check", "the-built-in-check"},
		{"A **bold** and _emphasised_ word", "a-bold-and-emphasised-word"},
		{"Measured: 10-minute runs", "measured-10-minute-runs"},
		{"make kube-up, make kube-test", "make-kube-up-make-kube-test"},
		{"Closing hashes ##", "closing-hashes"},
		{"Two  spaces", "two--spaces"},
	} {
		if got := slug(tt.heading); got != tt.want {
			t.Errorf("slug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

// tracked returns the repository's top directory and its tracked files.
func tracked(t *testing.T) (string, []string) {
	t.Helper()
	return repo.Tracked(t, "../..")
}

var (
	// fence opens or closes a fenced code block.
	fence = regexp.MustCompile("^ {0,3}(```+|~~~+)")
	// comment is an HTML comment.
	comment = regexp.MustCompile(`(?s)<!--.*?-->`)
	// codeSpan is an inline code span.
	codeSpan = regexp.MustCompile("(`+)[^`](?:.*?[^`])?(?:`+)")
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title; the text may hold one level of brackets and span lines.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDefinition is a reference link's definition: [label]: target.
	refDefinition = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	// atxHeading is a heading line; its text is the first group.
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// htmlAnchor is an explicit anchor: <a name="x"> or id="x".
	htmlAnchor = regexp.MustCompile(`<[a-zA-Z][^>]*\s(?:name|id)="([^"]+)"`)
)

// checkLinks checks the links of every Markdown file among files, which
// are the paths (slash-separated, from the top of fsys) that exist. It
// returns the problems, and how many links it checked (other sites'
// not counted).
func checkLinks(fsys fs.FS, files []string) (problems []string, checked int) {
	exists := map[string]bool{}
	for _, f := range files {
		exists[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			exists[d+"/"] = true
		}
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(data))
		anchors[file] = a
		return a, nil
	}

	for _, file := range files {
		if !strings.HasSuffix(file, ".md") {
			continue
		}
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		text := prose(string(data))
		for _, l := range links(text) {
			problem := func(format string, args ...any) {
				problems = append(problems, fmt.Sprintf("%s:%d: %q: %s", file, l.line, l.target, fmt.Sprintf(format, args...)))
			}
			target := strings.Trim(l.target, "<>")
			if u, err := url.Parse(target); err == nil && u.Scheme != "" {
				continue // another site, or mailto:
			}
			checked++
			p, anchor, _ := strings.Cut(target, "#")
			p, err := url.PathUnescape(p)
			if err != nil {
				problem("%v", err)
				continue
			}
			dest := file
			switch {
			case p == "":
			case strings.HasPrefix(p, "/"):
				dest = path.Clean(strings.TrimPrefix(p, "/"))
			default:
				dest = path.Join(path.Dir(file), p)
			}
			isDir := exists[dest+"/"] || dest == "."
			if !exists[dest] && !isDir || dest == ".." || strings.HasPrefix(dest, "../") {
				problem("not a tracked file or directory")
				continue
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				problem("%v", err)
				continue
			}
			if !a[anchor] {
				problem("%s has no heading with the anchor %s", dest, anchor)
			}
		}
	}
	return problems, checked
}

type link struct {
	target string
	line   int
}

// links lists the link targets of text, which prose has cleaned.
func links(text string) []link {
	var out []link
	for _, re := range []*regexp.Regexp{inlineLink, refDefinition} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			out = append(out, link{target: text[m[2]:m[3]], line: 1 + strings.Count(text[:m[2]], "\n")})
		}
	}
	return out
}

// prose is text with its code blocks, code spans and comments blanked
// out, line breaks kept so that line numbers hold.
func prose(text string) string {
	blank := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	}
	text = comment.ReplaceAllStringFunc(text, blank)
	lines := strings.Split(text, "\n")
	var open string
	for i, line := range lines {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
				lines[i] = ""
				continue
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line) == m[1]:
				open = ""
				lines[i] = ""
				continue
			}
		}
		if open != "" {
			lines[i] = ""
			continue
		}
		lines[i] = codeSpan.ReplaceAllStringFunc(line, blank)
	}
	return strings.Join(lines, "\n")
}

// headingAnchors lists the anchors GitHub gives the headings of a page,
// and its explicit HTML anchors.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	lines := strings.Split(text, "\n")
	var open string
	for _, line := range lines {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
				continue
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line) == m[1]:
				open = ""
				continue
			}
		}
		if open != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}

var (
	headingLink     = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)
	headingTag      = regexp.MustCompile(`</?[a-zA-Z][^>]*>`)
	headingEmphasis = regexp.MustCompile(`(^|[^\p{L}\p{N}_])_+([^_]+?)_+($|[^\p{L}\p{N}_])`)
	headingCode     = regexp.MustCompile("`+([^`]*)`+")
)

// slug is the anchor GitHub makes of a heading's text: the text as
// rendered (code, links and emphasis reduced to their words), in lower
// case, without punctuation, each space a '-'.
func slug(heading string) string {
	heading = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(heading), "#"))
	// Emphasis, links and tags outside code spans; code spans keep their
	// text as it is.
	var b strings.Builder
	rest := heading
	for {
		loc := headingCode.FindStringSubmatchIndex(rest)
		if loc == nil {
			b.WriteString(plain(rest))
			break
		}
		b.WriteString(plain(rest[:loc[0]]))
		b.WriteString(rest[loc[2]:loc[3]])
		rest = rest[loc[1]:]
	}
	var s strings.Builder
	for _, r := range strings.ToLower(b.String()) {
		switch {
		case r == ' ':
			s.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			s.WriteRune(r)
		}
	}
	return s.String()
}

// plain is Markdown text outside code spans as GitHub renders it.
func plain(s string) string {
	s = headingLink.ReplaceAllString(s, "$1")
	s = headingTag.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, "*", "")
	for {
		t := headingEmphasis.ReplaceAllString(s, "$1$2$3")
		if t == s {
			break
		}
		s = t
	}
	return strings.NewReplacer(`\_`, "_", `\*`, "*", `\#`, "#", `\[`, "[", `\]`, "]").Replace(s)
}
