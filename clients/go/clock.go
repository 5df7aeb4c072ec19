package weir

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The clock the belief deadline is kept on (G2).
//
// The cluster's clocks, and so its leases, go on while this machine is suspended; Go's
// monotonic clock (time.Now's monotonic reading, CLOCK_MONOTONIC on Linux) does not. A
// deadline kept on it would let a client that resumes from a suspend believe in permits
// whose lease ran out in real time. Linux's CLOCK_BOOTTIME counts the suspend, but Go's
// standard library reads it only through a raw clock_gettime system call, which needs a
// pointer passed through package unsafe (syscall has no ClockGettime; x/sys/unix is not
// the standard library), and this module uses no unsafe. So bootNow reads the best the
// standard library offers: the monotonic clock, raised to /proc/uptime where that is ahead
// of it. /proc/uptime is CLOCK_BOOTTIME in hundredths of a second, so the elapsed time it
// shows, less one hundredth, never exceeds the real boot-clock time elapsed: bootNow never
// runs ahead of CLOCK_BOOTTIME, and after a suspend it lags it by at most 20 ms (a tenth
// of the 100 ms margin at least). Where /proc/uptime cannot be read (not Linux) bootNow is
// the monotonic clock alone, with the suspend caveat.

var (
	clockOnce    sync.Once
	clockStart   time.Time
	uptimeAtBase time.Duration
	uptimeOK     bool
)

// readUptime answers CLOCK_BOOTTIME as /proc/uptime shows it (10 ms resolution).
func readUptime() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	field := strings.Fields(string(b))
	if len(field) == 0 {
		return 0, false
	}
	secs, err := strconv.ParseFloat(field[0], 64)
	if err != nil || secs < 0 {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// bootNow answers the time elapsed since the first reading, counting suspend where the
// platform lets the standard library see it (the comment above).
func bootNow() time.Duration {
	clockOnce.Do(func() {
		clockStart = time.Now()
		uptimeAtBase, uptimeOK = readUptime()
	})
	mono := time.Since(clockStart)
	if !uptimeOK {
		return mono
	}
	up, ok := readUptime()
	if !ok {
		return mono
	}
	boot := up - uptimeAtBase - 10*time.Millisecond
	if boot > mono {
		return boot
	}
	return mono
}

// keepalivesPerTTL is how many keep-alives a session sends per TTL.
const keepalivesPerTTL = 5

// lookEvery is the longest a wait on the belief deadline sleeps before it reads the clock
// again, so a deadline passed during a suspend is noticed soon after resuming.
const lookEvery = 250 * time.Millisecond

// marginFor is the safety margin taken off the TTL: a tenth of it, at least 100 ms.
func marginFor(ttl time.Duration) time.Duration {
	m := ttl / 10
	if m < 100*time.Millisecond {
		m = 100 * time.Millisecond
	}
	return m
}

// deadlineAfter is the belief deadline after a keep-alive (or the open) sent at sent was
// acknowledged: the cluster cannot expire the session before sent + ttl, less the margin.
func deadlineAfter(sent, ttl time.Duration) time.Duration {
	return sent + ttl - marginFor(ttl)
}
