//go:build !unit

package dashboard

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/util/wait"
)

// chromium returns the browser: $REWIND_CHROMIUM (make sets it to the cache's launcher unless it
// is set already; /usr/bin/chromium, say, only when named here), else the launcher
// hack/chromium/fetch.sh (make chromium) writes into the cache: Debian's chromium unpacked there,
// not installed.
func chromium(t *testing.T) string {
	t.Helper()
	if c := os.Getenv("REWIND_CHROMIUM"); c != "" {
		p, err := exec.LookPath(c)
		if err != nil {
			t.Fatalf("REWIND_CHROMIUM=%s: %v", c, err)
		}
		return p
	}
	cache := os.Getenv("REWIND_TOOLS_CACHE")
	if cache == "" {
		root, err := filepath.Abs("../..")
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(root, ".cache", "tools")
	}
	p := filepath.Join(cache, "chromium", "chromium")
	if _, err := exec.LookPath(p); err != nil {
		t.Fatalf("chromium is missing: run `make chromium` (hack/chromium/fetch.sh unpacks Debian's chromium into %s, installing nothing), or set REWIND_CHROMIUM to a chromium", filepath.Dir(p))
	}
	return p
}

// browser starts a headless chromium with a fresh profile for the test and returns its
// context. When the test ends the browser is closed and the test checks that its process is
// gone.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	exe := chromium(t)
	// chromium keeps its process-singleton socket in a folder of $TMPDIR that it leaves behind
	// when it is stopped (headless, whether by SIGTERM or SIGKILL): it gets a folder of its own,
	// removed after the test (after its process is gone). A short name: the socket's path must
	// fit in 108 bytes, which t.TempDir's long names may not.
	tmp, err := os.MkdirTemp("", "rewind-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	profile := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.Env("TMPDIR=" + tmp),
		chromedp.WindowSize(1400, 1000),
	}
	opts = append(opts, extra...)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		acancel()
		t.Fatalf("starting chromium: %v", err)
	}
	if sock, err := os.Readlink(filepath.Join(profile, "SingletonSocket")); err == nil && !strings.HasPrefix(sock, tmp+"/") {
		t.Errorf("chromium keeps its socket in %s, outside the test's folder %s: it stays there after the test", sock, tmp)
	}
	proc := chromedp.FromContext(ctx).Browser.Process()
	if proc != nil {
		// Which binary runs (the launcher execs the unpacked one).
		if bin, err := os.Readlink("/proc/" + strconv.Itoa(proc.Pid) + "/exe"); err == nil {
			t.Logf("chromium: %s runs %s", exe, bin)
		}
	}
	t.Cleanup(func() {
		cancel()
		acancel()
		if proc == nil {
			return
		}
		gone := func(context.Context) (bool, error) { return errors.Is(syscall.Kill(proc.Pid, 0), syscall.ESRCH), nil }
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, gone); err != nil {
			t.Errorf("chromium (pid %d) is still running after the test", proc.Pid)
			_ = proc.Kill()
		}
	})
	return ctx
}

// run runs browser actions with a deadline.
func run(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("browser: evaluating %s: %v", expr, err)
	}
	return v
}

// waitJS polls a JavaScript expression in the page until it is true, failing after timeout
// with what describe (another expression) says then.
func waitJS(t *testing.T, ctx context.Context, timeout time.Duration, expr, describe string) {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ok, err := chromedp.Run(tctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		lastErr = err
		return err == nil && ok, nil
	})
	if err != nil {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, _ := chromedp.Run(tctx, chromedp.Evaluate[any](describe))
		cancel()
		t.Fatalf("waited %s for %s: %v (now: %v)", timeout, expr, lastErr, got)
	}
}

// screenshot saves a full-page PNG into $REWIND_SCREENSHOTS (else the test's temporary folder)
// and returns its path.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	buf, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("REWIND_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", p, len(buf))
	return p
}

// html returns the page's whole HTML as the browser has it now.
func html(t *testing.T, ctx context.Context) string {
	t.Helper()
	return eval[string](t, ctx, "document.documentElement.outerHTML")
}

func mustNotContain(t *testing.T, page, what string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(page, s) {
			t.Errorf("%s shows a Secret value (%d characters long)", what, len(s))
		}
	}
}
