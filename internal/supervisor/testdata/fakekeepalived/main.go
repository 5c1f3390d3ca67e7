// Command fakekeepalived stands in for keepalived in the supervisor's tests.
// It appends what happens to it to $FAKE_KEEPALIVED_DIR/events, one line per
// event ("start <pid> <argv as JSON>", "running <pid>" once it stays up,
// "signal <pid> <name>", "grandchild <pid>", "exit <pid> <code>"), and reads its behaviour from
// files in that directory at each start:
//
//	stdout, stderr   written to the streams verbatim at start
//	grandchild       fork a grandchild that exits once this process is gone
//	exit-code        exit with this code right after starting
//	ignore-term      ignore SIGTERM
//	hold-term        on SIGTERM, exit only once the file term-release exists
//
// With -p FILE it writes its pid to FILE, like keepalived. On keepalived's
// JSON dump signal (SIGRTMIN+2 with glibc) it logs keepalived's notice of
// it to its standard error, then records "dump <pid>".
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	dir := os.Getenv("FAKE_KEEPALIVED_DIR")
	if dir == "" {
		fmt.Fprintln(os.Stderr, "fakekeepalived: FAKE_KEEPALIVED_DIR is not set")
		os.Exit(3)
	}
	if os.Getenv("FAKE_KEEPALIVED_ROLE") == "grandchild" {
		grandchild()
		return
	}
	pid := os.Getpid()
	// Catch signals before announcing the start, so none is missed.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, sigJSON)
	if exists(dir, "ignore-term") {
		signal.Ignore(syscall.SIGTERM)
	}
	argv, _ := json.Marshal(os.Args)
	for i, a := range os.Args {
		if a == "-p" && i+1 < len(os.Args) {
			must(os.WriteFile(os.Args[i+1], []byte(strconv.Itoa(pid)+"\n"), 0o644))
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "stdout")); err == nil {
		os.Stdout.Write(b)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "stderr")); err == nil {
		os.Stderr.Write(b)
	}
	if exists(dir, "grandchild") {
		exe, err := os.Executable()
		must(err)
		p, err := os.StartProcess(exe, []string{exe}, &os.ProcAttr{
			Env: append(os.Environ(), "FAKE_KEEPALIVED_ROLE=grandchild",
				"FAKE_KEEPALIVED_PARENT="+strconv.Itoa(pid)),
			Files: []*os.File{nil, os.Stdout, os.Stderr},
		})
		must(err)
		event(dir, "grandchild %d", p.Pid)
	}
	event(dir, "start %d %s", pid, argv)
	if b, err := os.ReadFile(filepath.Join(dir, "exit-code")); err == nil {
		code, err := strconv.Atoi(strings.TrimSpace(string(b)))
		must(err)
		event(dir, "exit %d %d", pid, code)
		os.Exit(code)
	}
	event(dir, "running %d", pid)
	for sig := range sigs {
		if sig == sigJSON {
			fmt.Fprintf(os.Stderr, "%s: Printing VRRP as json for process(%d) on signal\n", time.Now().Format("Mon Jan _2 15:04:05 2006"), pid)
			event(dir, "dump %d", pid)
			continue
		}
		name := strings.ToUpper(sig.(syscall.Signal).String())
		event(dir, "signal %d %s", pid, name)
		if sig == syscall.SIGHUP {
			continue
		}
		if exists(dir, "hold-term") {
			for !exists(dir, "term-release") {
				time.Sleep(10 * time.Millisecond)
			}
		}
		event(dir, "exit %d 0", pid)
		os.Exit(0)
	}
}

// sigJSON is keepalived's JSON dump signal with glibc (keepalived
// --signum=JSON).
const sigJSON = syscall.Signal(36)

// grandchild waits until its parent is gone, then exits (becoming a zombie
// of whoever adopted it).
func grandchild() {
	parent, err := strconv.Atoi(os.Getenv("FAKE_KEEPALIVED_PARENT"))
	must(err)
	for os.Getppid() == parent {
		time.Sleep(5 * time.Millisecond)
	}
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

func event(dir, format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(dir, "events"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(err)
	_, err = fmt.Fprintf(f, format+"\n", args...)
	must(err)
	must(f.Close())
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakekeepalived:", err)
		os.Exit(3)
	}
}
