// Package keepalived knows keepalived's formats: it renders keepalived.conf
// from a validated configuration and reads it back, decodes keepalived's
// JSON dump, and finds the binary and its signal numbers.
//
// Rendering: every number is computed before the template runs
// (config.Instances); the template only lays the values out. As a second
// line of defence after config's validation, every bare word must be one
// keepalived token and every quoted string must stay inside its quotes, so
// that no value can change the structure of the file.
package keepalived

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/ipfailover/ipfailover/config"
)

//go:embed keepalived.conf.tmpl
var text string

var tmpl = template.Must(template.New("keepalived.conf").
	Option("missingkey=error").
	Funcs(template.FuncMap{"tok": token, "quoted": quoted}).
	Parse(text))

// data is what the template sees.
type data struct {
	Emails     []string
	SMTPServer string
	RouterID   string
	VRRPv3     bool
	CheckName  string
	// CheckFile, CheckTarget and CheckPeriod describe the built-in port
	// check; CheckCommand and CheckInterval a check keepalived runs.
	CheckFile     string
	CheckTarget   string
	CheckPeriod   string
	CheckCommand  string
	CheckInterval int
	AdvertInt     string
	// GARPRefresh is vrrp_garp_master_refresh in seconds (0: none) and
	// GARPRefreshRepeat its repeat count.
	GARPRefresh       int
	GARPRefreshRepeat int
	Preemption        string
	AuthPass          string
	Notify            string
	NotifyFIFO        string
	Instances         []config.Instance
}

// Render writes the keepalived.conf that node runs for c with the given
// instances (from c.Instances(node)).
func Render(c *config.Config, node config.Node, instances []config.Instance) ([]byte, error) {
	d := data{
		Emails:     c.AdminEmails,
		SMTPServer: c.SMTPServer,
		RouterID:   c.Scrubbed,
		CheckName:  c.CheckScriptName(),
		Preemption: c.Preemption.String(),
		AuthPass:   c.Name,
		Notify:     c.NotifyScript,
		NotifyFIFO: NotifyFIFO,
		Instances:  instances,

		GARPRefresh:       int(c.GARPRefresh / time.Second),
		GARPRefreshRepeat: c.GARPRefreshRepeat,
	}
	switch c.Check {
	case config.CheckPort:
		d.CheckFile = CheckFile
		d.CheckTarget = c.CheckTarget(node).String()
		d.CheckPeriod = c.CheckInterval.String()
	case config.CheckScript:
		d.CheckCommand, d.CheckInterval = c.CheckScript, int(c.CheckInterval/time.Second)
	default:
		d.CheckCommand, d.CheckInterval = "/bin/true", int(c.CheckInterval/time.Second)
	}
	// keepalived runs VRRPv2 for IPv4 unless told otherwise, and v2 has
	// whole seconds only; its default interval is 1 s.
	interval, v3 := c.Adverts()
	d.VRRPv3 = v3
	if interval != config.DefaultAdvertInterval {
		d.AdvertInt = AdvertInt(interval)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("rendering keepalived.conf: %w", err)
	}
	return b.Bytes(), nil
}

// CheckFile is where ipfailover's built-in check writes its result for
// keepalived: 1 when the check passes, 0 when it fails. keepalived watches
// it with inotify (track_file, "weight 0 reverse": 0, or no file, is FAULT).
const CheckFile = "/run/ipfailover/check"

// AdvertInt formats an advert interval as keepalived reads it: whole
// seconds, or seconds with hundredths.
func AdvertInt(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprint(int(d / time.Second))
	}
	return strings.TrimRight(fmt.Sprintf("%.2f", d.Seconds()), "0")
}

// token refuses a value that is not exactly one keepalived word.
func token(v any) (string, error) {
	s := fmt.Sprint(v)
	if s == "" || strings.ContainsAny(s, " \t\r\n\"'{}#!\\$") {
		return "", fmt.Errorf("value %q is not a single keepalived word", s)
	}
	return s, nil
}

// quoted refuses a value that would end its quoted string or the line.
func quoted(v any) (string, error) {
	s := fmt.Sprint(v)
	if strings.ContainsAny(s, "\r\n\"\\{}#!$") {
		return "", fmt.Errorf("value %q cannot be quoted safely in keepalived.conf", s)
	}
	return s, nil
}
