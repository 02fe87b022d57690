package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/shardnode/shardnode/freeport"
)

// childStartTimeout bounds how long a child (a node or a ceiling) may take
// to answer its first request.
const childStartTimeout = time.Minute

// childStopTimeout bounds a child's graceful shutdown after SIGTERM; then
// it is killed.
const childStopTimeout = 30 * time.Second

// childProc is one process the benchmark started: a node (`serve`) or an
// HTTP ceiling (`bench-ceiling`). Its output goes to a log file, whose end
// is quoted when it fails to start.
type childProc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startChild starts binary with args, its output appended to logPath.
func startChild(name, binary string, args []string, logPath string) (*childProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, binary, err)
	}
	p := &childProc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// pid is the child's process id.
func (p *childProc) pid() int { return p.cmd.Process.Pid }

// waitReady polls url until it answers 200, the child exits, or ctx or
// childStartTimeout ends; an exit or a timeout is an error quoting the
// end of the child's log.
func (p *childProc) waitReady(ctx context.Context, hc *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, childStartTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var buf bytes.Buffer
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		last = do(rctx, hc, http.MethodGet, url, nil, http.StatusOK, &buf)
		rcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was ready (%v); its log ends:\n%s", p.name, p.err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (%w; its last answer: %v); its log ends:\n%s", p.name, ctx.Err(), last, p.logTail())
		case <-tick.C:
		}
	}
}

// logTail returns the last few KiB of the child's log.
func (p *childProc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// stop asks the child to shut down (SIGTERM) and kills it if it has not
// after childStopTimeout.
func (p *childProc) stop() error {
	select {
	case <-p.exited:
		return p.exitErr()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.exitErr()
	case <-time.After(childStopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s: killed: no exit %s after SIGTERM", p.name, childStopTimeout)
	}
}

// exitErr is the child's exit status as an error, nil for a clean exit.
func (p *childProc) exitErr() error {
	if p.err != nil {
		return fmt.Errorf("%s: %w; its log ends:\n%s", p.name, p.err, p.logTail())
	}
	return nil
}

// startChildNode runs `binary serve` as a one-node cluster with its data
// in dir, and waits until its /healthz says it is ready. cpuProfile, when
// set, is passed on as serve's --cpuprofile.
func startChildNode(ctx context.Context, hc *http.Client, binary, dir, cpuProfile string) (*childProc, string, error) {
	var extra []string
	if cpuProfile != "" {
		extra = []string{"--cpuprofile", cpuProfile}
	}
	return startServe(ctx, hc, binary, "node", dir, extra)
}

// startServe runs `binary serve` with its data under dir and its log in
// dir/node.log, on HTTP, raft and NATS loopback ports free a moment ago (a
// child cannot report the ports it would bind for ":0"), with extra
// flags, and waits until its /healthz answers 200. It returns the child
// and its base URL.
func startServe(ctx context.Context, hc *http.Client, binary, name, dir string, extra []string) (*childProc, string, error) {
	ports, err := freeport.Take(3)
	if err != nil {
		return nil, "", fmt.Errorf("%s ports: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("%s dir: %w", name, err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	args := append([]string{"serve", "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", addr(0), "--raft-addr", addr(1), "--nats-listen", addr(2)}, extra...)
	p, err := startChild(name, binary, args, filepath.Join(dir, "node.log"))
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr(0)
	if err := p.waitReady(ctx, hc, base+"/healthz"); err != nil {
		return nil, "", errors.Join(err, p.stop())
	}
	return p, base, nil
}

// startChildCeiling runs `binary bench-ceiling --server label` on a free
// loopback port and waits until it answers.
func startChildCeiling(ctx context.Context, binary, logDir, label string) (*httpCeiling, error) {
	ports, err := freeport.Take(1)
	if err != nil {
		return nil, fmt.Errorf("http ceiling %s: port: %w", label, err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	p, err := startChild("http ceiling "+label, binary,
		[]string{"bench-ceiling", "--server", label, "--listen", base[len("http://"):]},
		filepath.Join(logDir, label+".log"))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	if err := p.waitReady(ctx, hc, base+"/docs?id=probe"); err != nil {
		return nil, errors.Join(err, p.stop())
	}
	return &httpCeiling{label: label, stop: p.stop, base: base}, nil
}
