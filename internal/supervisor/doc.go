// Package supervisor runs keepalived the way PID 1 of a container must: it
// starts `keepalived -n --log-console [--no-syslog] -f <config> [extra
// flags]` with its output passed through unchanged but for its notices of
// JSON dump signals, restarts it with backoff when it dies, gives up with
// an error on a crash loop, reloads it with SIGHUP and stops it gracefully
// (SIGTERM, then time for its priority-0 adverts, then SIGKILL only after
// Options.StopTimeout).
//
// # Reaping
//
// When keepalived dies its VRRP and checker children, and the check scripts
// they run, are re-parented to PID 1, or to the nearest "child subreaper".
// A Reaper makes the process one (PR_SET_CHILD_SUBREAPER) when it is not PID
// 1, so the same code works in a container and in tests, and reaps every
// zombie child on SIGCHLD. One goroutine (Reaper.Run) owns reaping. keepalived
// itself is never waited for with exec.Cmd.Wait or os.Process.Wait: it is
// started under the reaper's lock and its pid is registered before the lock is
// released, so its exit status always reaches the supervisor through the
// reaper and never gets lost.
//
// A reaper that calls wait4(-1) steals the exit status of children that other
// code in the process waits for itself (exec.Command("iptables", ...).Run(),
// including inside libraries such as go-iptables): their Wait then fails with
// ECHILD. This reaper never calls wait4(-1). It first looks at the next zombie
// without reaping it (waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT)) and reaps it by
// pid only when nobody else can wait for it:
//
//   - a pid registered by the supervisor is reaped and its status dispatched;
//   - a pid started through Reaper.Start or Reaper.RunCommand is left alone;
//   - a pid for which this process holds a pidfd is left alone. Since Go 1.23
//     os.StartProcess (and so exec.Cmd.Start) creates every child with
//     clone(CLONE_PIDFD) and keeps that pidfd open until its Wait has reaped
//     the child; the kernel installs the pidfd before the child can run, so
//     there is no window in which such a child looks like an orphan. The
//     reaper reads /proc/self/fdinfo to find them.
//   - anything else (an orphan adopted from keepalived) is reaped and dropped.
//
// When the next zombie belongs to someone else it hides the ones behind it
// from waitid, so the reaper then lists this process's zombie children in
// /proc and reaps the orphans among them by pid. The result: plain
// exec.Command(...).Run() anywhere in the process keeps working, on kernels
// with pidfd support (5.4+). On a kernel without it (Go then falls back to
// plain pids) only commands run through Reaper.Start/RunCommand are safe.
// Code that keeps a pidfd of a process open without ever waiting for it
// (os.FindProcess on a child, for instance) keeps that child a zombie.
//
// # keepalived's process group
//
// keepalived runs in a process group of its own, which its VRRP, checker and
// BFD children join. When keepalived dies (or is killed), those children live
// on for a while as orphans; a new keepalived started meanwhile would find
// their pid files and exit ("daemon is already running") while the old VRRP
// child still holds the VIPs. So after every exit the rest of the group gets
// SIGTERM (time for priority-0 adverts), StopTimeout, then SIGKILL, before
// keepalived is started again. Descendants that left the group (keepalived
// may give check scripts groups of their own) are not signalled, only reaped.
package supervisor
