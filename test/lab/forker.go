package lab

import (
	"os/exec"
	"runtime"
	"sync"
)

// The kernel sends a child its Pdeathsig when the thread that forked it
// exits, not when the parent process does. Go keeps its threads, except
// that a goroutine that ends while locked to its thread takes the thread
// with it: a test that holds a ptrace tracee, or code that leaves a thread
// in another namespace, does that. A node's process forked on such a
// thread earlier would be killed then, in the middle of another test. So
// every node process is forked by one goroutine locked, for good, to a
// thread of its own, which ends only with the process.

type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var forker = sync.OnceValue(func() chan<- forkRequest {
	requests := make(chan forkRequest)
	go func() {
		runtime.LockOSThread() // never unlocked: this goroutine never ends
		for r := range requests {
			r.done <- r.cmd.Start()
		}
	}()
	return requests
})

// startFromForker starts cmd (cmd.Start) on the forker's thread.
func startFromForker(cmd *exec.Cmd) error {
	r := forkRequest{cmd: cmd, done: make(chan error, 1)}
	forker() <- r
	return <-r.done
}
