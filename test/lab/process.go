package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/ipfailover/ipfailover/internal/proc"
)

// Process is a command started with Node.Start: PID 1 of its own PID
// namespace.
type Process struct {
	// Pid is the command's PID in the root PID namespace (it is 1 inside).
	Pid int
	// Argv is the command line as given to Start.
	Argv []string

	node *Node
	cmd  *exec.Cmd
	done chan struct{}
	code int
	err  error
}

func (p *Process) wait() {
	err := p.cmd.Wait()
	p.code, p.err = exitCode(p.cmd.ProcessState, err)
	p.node.cluster.log.Info("exited", "node", p.node.Name, "pid", p.Pid, "code", p.code)
	close(p.done)
}

func exitCode(st *os.ProcessState, err error) (int, error) {
	if st == nil {
		return -1, err
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return st.ExitCode(), nil
}

// Node returns the node the process runs on.
func (p *Process) Node() *Node { return p.node }

// Signal sends sig to the process (PID 1 of its namespace). Note that the
// kernel only delivers signals to a namespace's PID 1 that it handles.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return os.ErrProcessDone
	}
	return syscall.Kill(p.Pid, sig)
}

// Kill sends SIGKILL, which ends every process of the PID namespace.
func (p *Process) Kill() error {
	err := p.Signal(syscall.SIGKILL)
	if errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Done is closed when the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit, or ctx to end. The code is the exit
// status, or 128+signal when a signal ended it.
func (p *Process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.code, p.err
	case <-ctx.Done():
		return -1, fmt.Errorf("waiting for %s pid %d: %w", p.node.Name, p.Pid, ctx.Err())
	}
}

// Exec runs a one-off command inside the process's network, mount and PID
// namespaces (so it sees the private /run and /proc) and returns its
// combined output.
func (p *Process) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	pid := strconv.Itoa(p.Pid)
	return execOut(ctx, append([]string{"nsenter", "-t", pid, "--net", "--mount", "--pid", "--"}, argv...))
}

// ReadFile reads a file as the process sees it (through /proc/<pid>/root,
// so in its mount namespace).
func (p *Process) ReadFile(path string) ([]byte, error) {
	return os.ReadFile(fmt.Sprintf("/proc/%d/root/%s", p.Pid, strings.TrimPrefix(path, "/")))
}

// Proc is one process of a PID namespace as /proc shows it.
type Proc struct {
	// Pid in the root namespace, NSPid inside the process's namespace.
	Pid, NSPid int
	// PPid is the parent's PID in the root namespace.
	PPid int
	// Comm is the command name (/proc/<pid>/comm).
	Comm string
	// State is the state letter of /proc/<pid>/stat: R, S, D, Z...
	State string
}

// Procs lists every process in the PID namespace of p, p included.
func (p *Process) Procs() ([]Proc, error) {
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p.Pid))
	if err != nil {
		return nil, fmt.Errorf("reading the pid namespace of %d: %w", p.Pid, err)
	}
	pids, err := proc.FS{}.PIDs()
	if err != nil {
		return nil, err
	}
	// A zombie has no namespace links left; it belongs to the namespace
	// of its parent, which is alive (a zombie's parent is the reaper
	// that failed to reap it).
	var out, orphans []Proc
	in := map[int]bool{}
	for _, pid := range pids {
		pr, err := readProc(pid)
		if err != nil {
			continue // exited meanwhile
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		switch {
		case err != nil && pr.State == "Z":
			orphans = append(orphans, pr)
		case err == nil && ns == want:
			out = append(out, pr)
			in[pid] = true
		}
	}
	for _, pr := range orphans {
		if in[pr.PPid] {
			out = append(out, pr)
		}
	}
	return out, nil
}

// Zombies returns the processes of p's PID namespace in state Z.
func (p *Process) Zombies() ([]Proc, error) {
	all, err := p.Procs()
	if err != nil {
		return nil, err
	}
	var z []Proc
	for _, pr := range all {
		if pr.State == "Z" {
			z = append(z, pr)
		}
	}
	return z, nil
}

// Find returns the processes of p's PID namespace whose comm is name.
func (p *Process) Find(name string) ([]Proc, error) {
	all, err := p.Procs()
	if err != nil {
		return nil, err
	}
	var found []Proc
	for _, pr := range all {
		if pr.Comm == name {
			found = append(found, pr)
		}
	}
	return found, nil
}

// HostPid translates a PID as seen inside p's namespace (from a pid file,
// say) to the root namespace's PID.
func (p *Process) HostPid(nsPid int) (int, error) {
	all, err := p.Procs()
	if err != nil {
		return 0, err
	}
	for _, pr := range all {
		if pr.NSPid == nsPid {
			return pr.Pid, nil
		}
	}
	return 0, fmt.Errorf("no pid %d in the namespace of %d", nsPid, p.Pid)
}

func readProc(pid int) (Proc, error) {
	var fs proc.FS
	st, err := fs.Stat(pid)
	if err != nil {
		return Proc{}, err
	}
	status, err := fs.Status(pid)
	if err != nil {
		return Proc{}, err
	}
	pr := Proc{Pid: pid, PPid: st.PPID, Comm: st.Comm, State: string(st.State)}
	if n := len(status.NSpid); n > 0 {
		pr.NSPid = status.NSpid[n-1]
	}
	return pr, nil
}

// Procs lists every process, of any PID namespace, that runs in the node's
// network namespace: what a node would show with ps.
func (n *Node) Procs() ([]Proc, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+n.Netns, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", n.Name, err)
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	pids, err := proc.FS{}.PIDs()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, pid := range pids {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil || ns != want {
			continue
		}
		if pr, err := readProc(pid); err == nil {
			out = append(out, pr)
		}
	}
	return out, nil
}
