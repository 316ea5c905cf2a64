// Command loadgen is a closed-loop load generator on Go's ZooKeeper client
// (github.com/go-zookeeper/zk): the same workloads, tree and op sequence as
// `keel bench` (crates/bench) and bench/java/LoadGen.java, so a result can be
// checked with a third client library, one much lighter than the JVM.
//
// Each session is one *zk.Conn connected to one server (session i on
// servers[i % n]) with exactly one request in flight: one goroutine per
// session issues a request, waits for its reply, records it and issues the
// next. A run: connect the admin session (first server) and the sessions;
// build the tree under a fresh root; sync every session on it; warm-up (ops
// not recorded, errors counted); timed phase (a progress line on stderr once
// a second, in keel bench's format); wait for the replies still due; close
// the sessions; delete the tree (unless --keep); print the summary on stdout,
// one "key value" per line, the keys LoadGen.java prints.
//
//	root/data/n000..n099     dataNodes nodes of the value size     (mix: get, set)
//	root/list/c000..c099     listChildren of listChildBytes        (mix: getChildren)
//	root/writes/c<i>/l0-b<k>/n<index>  creates (and mix deletes), bucketNodes per bucket
//
// Exit status: 0 after a run (errors are in the summary), 1 when the run could
// not be made (connect, setup), 2 on bad arguments.
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// The constants of crates/bench (lib.rs, workload.rs); keep them equal.
const (
	defaultSeed        uint64 = 0x4B45454C42454E43
	dataNodes                 = 100
	listChildren              = 100
	listChildBytes            = 50
	bucketNodes        int64  = 10_000
	deletePoolPerLane  int64  = 8
	deletePoolTotal    int64  = 20_000
	sessionTimeoutMs          = 30_000
	defaultValueBytes         = 100
	maxValueBytes             = 1 << 20
	maxSessions               = 10_000
	maxDurationS       int64  = 24 * 60 * 60
	mixBasisPointsSum         = 10_000
	setupConcurrency          = 256     // requests in flight on the admin session while building or deleting the tree
	connectTimeoutMs          = 20_000  // every session to connect, all opened at once
	setupTimeoutMs            = 120_000 // the syncs, and each level of the tree setup
	drainTimeoutMs            = 60_000  // after the deadline, for the replies still due
	clientBufferBytes         = 2 << 20 // the client's encode and decode buffers (the library's default is 1.5 MiB each)
	progressIntervalMs        = 1_000
)

const (
	opCreate = iota
	opSet
	opGet
	opList
	opDelete
	opKinds
)

var kindNames = [opKinds]string{"create", "set", "get", "list", "delete"}

// keel bench's MIX_BASIS_POINTS (RaftKeeper's mix), in the same order.
var mixBasisPoints = [...][2]int{
	{opCreate, 100}, {opSet, 800}, {opGet, 4_500}, {opList, 4_500}, {opDelete, 100},
}

const usage = `usage: loadgen --servers HOST:PORT[,HOST:PORT...] --workload create|mix
               --sessions N --duration S [--warmup S] [--value-size BYTES] [--keep]
  --sessions   zk.Conn sessions, session i on server i mod n, one request in flight each (1..10000)
  --duration   timed seconds (1..86400)
  --warmup     seconds of load before the timed phase, not recorded (default 0)
  --value-size data bytes of created, set and data nodes (0..1048576, default 100)
  --keep       leave the tree on the server (default: delete it at the end)
`

// ---- arguments ----------------------------------------------------------

type config struct {
	servers    []string
	workload   string
	sessions   int
	durationS  int64
	warmupS    int64
	valueBytes int
	keep       bool
}

// valueFlags are the options that take a value.
var valueFlags = map[string]bool{
	"--servers": true, "--workload": true, "--sessions": true, "--duration": true, "--warmup": true,
	"--value-size": true,
}

type badArgs struct{ msg string }

func (b badArgs) Error() string { return b.msg }

func number(flag, v string, min, max int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, badArgs{fmt.Sprintf("%s wants a whole number, got %q", flag, v)}
	}
	if n < min || n > max {
		return 0, badArgs{fmt.Sprintf("%s must be %d..%d, got %d", flag, min, max, n)}
	}
	return n, nil
}

func parseServers(v string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		colon := strings.LastIndex(s, ":")
		if colon <= 0 || strings.Contains(s, "/") {
			return nil, badArgs{fmt.Sprintf("bad server address %q: expected HOST:PORT", s)}
		}
		if _, err := number("port of "+s, s[colon+1:], 1, 65535); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func parseArgs(args []string) (config, error) {
	c := config{sessions: -1, durationS: -1, valueBytes: defaultValueBytes}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--keep":
			c.keep = true
			continue
		case a == "-h" || a == "--help":
			return c, badArgs{""}
		case !strings.HasPrefix(a, "--"):
			return c, badArgs{fmt.Sprintf("unexpected argument %q", a)}
		case !valueFlags[a]:
			return c, badArgs{"unknown option " + a}
		case i+1 >= len(args):
			return c, badArgs{a + " needs a value"}
		}
		i++
		v := args[i]
		var n int64
		var err error
		switch a {
		case "--servers":
			var more []string
			more, err = parseServers(v)
			c.servers = append(c.servers, more...)
		case "--workload":
			if v != "create" && v != "mix" {
				err = badArgs{fmt.Sprintf("unknown workload %q; expected create or mix", v)}
			}
			c.workload = v
		case "--sessions":
			n, err = number(a, v, 1, maxSessions)
			c.sessions = int(n)
		case "--duration":
			c.durationS, err = number(a, v, 1, maxDurationS)
		case "--warmup":
			c.warmupS, err = number(a, v, 0, maxDurationS)
		case "--value-size":
			n, err = number(a, v, 0, maxValueBytes)
			c.valueBytes = int(n)
		}
		if err != nil {
			return c, err
		}
	}
	switch {
	case len(c.servers) == 0:
		return c, badArgs{"no server given (--servers HOST:PORT[,HOST:PORT...])"}
	case c.workload == "":
		return c, badArgs{"--workload is required (create or mix)"}
	case c.sessions < 0:
		return c, badArgs{"--sessions is required"}
	case c.durationS < 0:
		return c, badArgs{"--duration is required"}
	}
	return c, nil
}

// ---- keel bench's generator -------------------------------------------------

// splitMix64 is exactly crates/bench/src/workload.rs's (same seeds, same streams).
type splitMix64 struct{ state uint64 }

func laneRng(seed uint64, lane uint64) splitMix64 {
	mixer := splitMix64{seed ^ (lane * 0xD1B54A32D192ED03)}
	return splitMix64{mixer.next()}
}

func (s *splitMix64) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// below is (next() * n) >> 64 over unsigned 128 bits, n > 0: Lemire's multiply-shift.
func (s *splitMix64) below(n uint64) uint64 {
	if n == 0 {
		panic("below(0)")
	}
	hi, _ := bits.Mul64(s.next(), n)
	return hi
}

// ---- latency histogram --------------------------------------------------------

// histogram holds microsecond latencies, exact below 2048 µs, then 1024
// buckets per power of two (0.1 % resolution), as LoadGen.java's. Shared by
// every lane; quantiles give the bucket's highest value.
const (
	histSubBits  = 10
	histSub      = 1 << histSubBits
	histMaxShift = 40
	histBuckets  = 2*histSub + histMaxShift*histSub
)

type histogram struct{ counts [histBuckets]atomic.Uint64 }

func histIndex(us int64) int {
	if us < 2*histSub {
		if us < 0 {
			return 0
		}
		return int(us)
	}
	shift := 63 - bits.LeadingZeros64(uint64(us)) - histSubBits
	if shift > histMaxShift {
		shift = histMaxShift
		us = (2*histSub)<<shift - 1
	}
	return 2*histSub + (shift-1)*histSub + int((us>>shift)-histSub)
}

func histHighest(index int) int64 {
	if index < 2*histSub {
		return int64(index)
	}
	shift := (index-2*histSub)/histSub + 1
	sub := int64((index-2*histSub)%histSub + histSub)
	return (sub+1)<<shift - 1
}

func (h *histogram) record(us int64) { h.counts[histIndex(us)].Add(1) }

func (h *histogram) quantile(q float64) int64 {
	var snap [histBuckets]uint64
	var total uint64
	for i := range h.counts {
		snap[i] = h.counts[i].Load()
		total += snap[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(q*float64(total) + 0.5)
	if want < 1 {
		want = 1
	}
	var seen uint64
	for i, c := range snap {
		seen += c
		if seen >= want {
			return histHighest(i)
		}
	}
	return histHighest(histBuckets - 1)
}

// ---- shared state -----------------------------------------------------------------

type counters struct {
	okByKind     [opKinds]atomic.Int64
	ok           atomic.Int64
	timedErrors  atomic.Int64
	warmupErrors atomic.Int64
	created      atomic.Int64 // every node the lanes made (warm-up and timed, buckets too)
	deleted      atomic.Int64
	newBuckets   atomic.Int64 // of created, the new buckets (untimed, like the setup)
	disconnects  atomic.Int64
	expiries     atomic.Int64
	running      atomic.Bool
	errorMu      sync.Mutex
	errorKinds   map[string]int64
	hist         histogram
}

var stats = counters{errorKinds: map[string]int64{}}

func logf(format string, args ...interface{}) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// codeNames are the exported errors of go-zookeeper by ZooKeeper's code name
// (KeeperException.Code), so the summary's error kinds read as LoadGen.java's.
var codeNames = []struct {
	err  error
	name string
}{
	{zk.ErrConnectionClosed, "CONNECTIONLOSS"}, {zk.ErrSessionExpired, "SESSIONEXPIRED"},
	{zk.ErrSessionMoved, "SESSIONMOVED"}, {zk.ErrNoNode, "NONODE"}, {zk.ErrNodeExists, "NODEEXISTS"},
	{zk.ErrBadVersion, "BADVERSION"}, {zk.ErrNotEmpty, "NOTEMPTY"}, {zk.ErrNoAuth, "NOAUTH"},
	{zk.ErrInvalidACL, "INVALIDACL"}, {zk.ErrAuthFailed, "AUTHFAILED"}, {zk.ErrBadArguments, "BADARGUMENTS"},
	{zk.ErrNoChildrenForEphemerals, "NOCHILDRENFOREPHEMERALS"}, {zk.ErrAPIError, "APIERROR"},
	{zk.ErrClosing, "CLOSING"}, {zk.ErrNoServer, "NOSERVER"}, {zk.ErrNothing, "NOTHING"},
	{zk.ErrUnknown, "UNKNOWN"},
}

func codeName(err error) string {
	for _, c := range codeNames {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "OTHER"
}

func countError(err error, timed bool) {
	suffix := "_warmup"
	if timed {
		stats.timedErrors.Add(1)
		suffix = ""
	} else {
		stats.warmupErrors.Add(1)
	}
	stats.errorMu.Lock()
	stats.errorKinds[codeName(err)+suffix]++
	stats.errorMu.Unlock()
}

// sessionLost is a result after which keel bench's lane stops: the session
// is not connected (the library reconnects by itself; the lane does not wait).
func sessionLost(err error) bool {
	for _, e := range []error{zk.ErrConnectionClosed, zk.ErrSessionExpired, zk.ErrSessionMoved,
		zk.ErrClosing, zk.ErrNoServer} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ---- sessions ----------------------------------------------------------------------

type quietLogger struct{}

func (quietLogger) Printf(string, ...interface{}) {}

type session struct {
	server    string
	conn      *zk.Conn
	connected chan struct{}
	once      sync.Once
}

func open(server string) (*session, error) {
	s := &session{server: server, connected: make(chan struct{})}
	onEvent := func(e zk.Event) {
		switch e.State {
		case zk.StateHasSession:
			s.once.Do(func() { close(s.connected) })
		case zk.StateDisconnected:
			if stats.running.Load() {
				stats.disconnects.Add(1)
			}
		case zk.StateExpired:
			if stats.running.Load() {
				stats.expiries.Add(1)
			}
		}
	}
	conn, _, err := zk.Connect([]string{server}, sessionTimeoutMs*time.Millisecond,
		zk.WithLogger(quietLogger{}), zk.WithLogInfo(false), zk.WithEventCallback(onEvent),
		zk.WithMaxBufferSize(clientBufferBytes), zk.WithMaxConnBufferSize(clientBufferBytes))
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %v", server, err)
	}
	s.conn = conn
	return s, nil
}

func connectAll(servers []string, n int) ([]*session, error) {
	out := make([]*session, 0, n)
	for i := 0; i < n; i++ {
		s, err := open(servers[i%len(servers)])
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, s)
	}
	deadline := time.After(connectTimeoutMs * time.Millisecond)
	for _, s := range out {
		select {
		case <-s.connected:
		case <-deadline:
			closeAll(out)
			return nil, fmt.Errorf("cannot connect to %s: no session within %d s", s.server, connectTimeoutMs/1000)
		}
	}
	return out, nil
}

func closeAll(sessions []*session) {
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Add(1)
		go func(s *session) {
			defer wg.Done()
			s.conn.Close()
		}(s)
	}
	wg.Wait()
}

// ---- the tree ------------------------------------------------------------------------

func dataNode(root string, i int) string { return fmt.Sprintf("%s/data/n%03d", root, i) }
func listNode(root string) string        { return root + "/list" }
func bucket(root string, client int, b int64) string {
	return root + "/writes/c" + strconv.Itoa(client) + "/l0-b" + strconv.FormatInt(b, 10)
}
func node(root string, client int, index int64) string {
	return bucket(root, client, index/bucketNodes) + "/n" + strconv.FormatInt(index, 10)
}

func valueOf(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte('a' + i%26)
	}
	return v
}

type spec struct {
	path string
	data []byte
}

// levels is keel bench's prepare_levels for one lane per session: parents before children.
func levels(root string, mix bool, sessions int, value []byte, pool int64) [][]spec {
	out := [][]spec{{{root, nil}}}
	var dirs, leaves, buckets, pooled []spec
	if mix {
		dirs = append(dirs, spec{root + "/data", nil})
		for i := 0; i < dataNodes; i++ {
			leaves = append(leaves, spec{dataNode(root, i), value})
		}
		child := []byte(strings.Repeat("c", listChildBytes))
		dirs = append(dirs, spec{listNode(root), nil})
		for i := 0; i < listChildren; i++ {
			leaves = append(leaves, spec{fmt.Sprintf("%s/c%03d", listNode(root), i), child})
		}
	}
	dirs = append(dirs, spec{root + "/writes", nil})
	for c := 0; c < sessions; c++ {
		leaves = append(leaves, spec{root + "/writes/c" + strconv.Itoa(c), nil})
		buckets = append(buckets, spec{bucket(root, c, 0), nil})
		for i := int64(0); i < pool; i++ {
			pooled = append(pooled, spec{node(root, c, i), value})
		}
	}
	for _, l := range [][]spec{dirs, leaves, buckets, pooled} {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// pipelined runs op for every item with at most setupConcurrency under way
// (the admin session's requests pipeline on its one connection); the first
// error not in acceptable, if any, as "item: CODE".
func pipelined[T any](items []T, name func(T) string, op func(T) error, acceptable ...error) error {
	slots := make(chan struct{}, setupConcurrency)
	var mu sync.Mutex
	var failure error
	var wg sync.WaitGroup
	for _, item := range items {
		mu.Lock()
		failed := failure != nil
		mu.Unlock()
		if failed {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-time.After(setupTimeoutMs * time.Millisecond):
			return fmt.Errorf("no reply within %d s", setupTimeoutMs/1000)
		}
		wg.Add(1)
		go func(item T) {
			defer wg.Done()
			defer func() { <-slots }()
			err := op(item)
			for _, a := range acceptable {
				if errors.Is(err, a) {
					err = nil
				}
			}
			if err != nil {
				mu.Lock()
				if failure == nil {
					failure = fmt.Errorf("%s: %s", name(item), codeName(err))
				}
				mu.Unlock()
			}
		}(item)
	}
	wg.Wait()
	return failure
}

func createLevels(conn *zk.Conn, lv [][]spec) (int64, error) {
	var made int64
	acl := zk.WorldACL(zk.PermAll)
	for _, level := range lv {
		err := pipelined(level, func(s spec) string { return s.path }, func(s spec) error {
			_, err := conn.Create(s.path, s.data, 0, acl)
			return err
		})
		if err != nil {
			return made, fmt.Errorf("preparing the tree failed at %v", err)
		}
		made += int64(len(level))
	}
	return made, nil
}

// deleteTree lists the tree top-down, then deletes it bottom-up; nodes already gone are fine.
func deleteTree(conn *zk.Conn, root string) (int64, error) {
	var lv [][]string
	level := []string{root}
	self := func(p string) string { return p }
	for len(level) > 0 {
		lv = append(lv, level)
		var mu sync.Mutex
		var next []string
		err := pipelined(level, self, func(p string) error {
			children, _, err := conn.Children(p)
			mu.Lock()
			for _, c := range children {
				next = append(next, p+"/"+c)
			}
			mu.Unlock()
			return err
		}, zk.ErrNoNode)
		if err != nil {
			return 0, fmt.Errorf("listing the tree failed at %v", err)
		}
		level = next
	}
	var deleted atomic.Int64
	for d := len(lv) - 1; d >= 0; d-- {
		err := pipelined(lv[d], self, func(p string) error {
			err := conn.Delete(p, -1)
			if err == nil {
				deleted.Add(1)
			}
			return err
		}, zk.ErrNoNode)
		if err != nil {
			return deleted.Load(), fmt.Errorf("deleting the tree failed at %v", err)
		}
	}
	return deleted.Load(), nil
}

// ---- the closed loop ------------------------------------------------------------------------

type plan struct {
	mix       bool
	root      string
	value     []byte
	dataPaths [dataNodes]string
	listPath  string
	timedFrom time.Time
	deadline  time.Time
}

// lane is one session's closed loop, as keel bench's run_lane: draw an op,
// issue it, record its reply, until the deadline or until the session is lost.
type lane struct {
	plan     *plan
	conn     *zk.Conn
	client   int
	rng      splitMix64
	nextNode int64
	live     []int64 // the delete pool, oldest first
	acl      []zk.ACL
}

func newLane(p *plan, conn *zk.Conn, client int, pool int64) *lane {
	l := &lane{plan: p, conn: conn, client: client, rng: laneRng(defaultSeed, uint64(client)),
		nextNode: pool, acl: zk.WorldACL(zk.PermAll)}
	for i := int64(0); i < pool; i++ {
		l.live = append(l.live, i)
	}
	return l
}

func (l *lane) draw() int {
	if !l.plan.mix {
		return opCreate
	}
	point := int(l.rng.below(mixBasisPointsSum))
	for _, share := range mixBasisPoints {
		if point < share[1] {
			return share[0]
		}
		point -= share[1]
	}
	panic("mixBasisPoints sums to 10 000")
}

// issue sends one request of the kind and waits for its reply.
func (l *lane) issue(kind int, index int64) error {
	p := l.plan
	switch kind {
	case opCreate:
		_, err := l.conn.Create(node(p.root, l.client, index), p.value, 0, l.acl)
		return err
	case opDelete:
		return l.conn.Delete(node(p.root, l.client, index), -1)
	case opSet:
		_, err := l.conn.Set(p.dataPaths[l.rng.below(dataNodes)], p.value, -1)
		return err
	case opGet:
		_, _, err := l.conn.Get(p.dataPaths[l.rng.below(dataNodes)])
		return err
	case opList:
		_, _, err := l.conn.Children(p.listPath)
		return err
	}
	panic(fmt.Sprintf("op kind %d", kind))
}

// bucketFirst creates a new bucket before the create that needs it:
// untimed, like the tree setup. False when the lane must not go on with it.
func (l *lane) bucketFirst(index int64, started time.Time) (proceed bool, stop bool) {
	_, err := l.conn.Create(bucket(l.plan.root, l.client, index/bucketNodes), nil, 0, l.acl)
	if err == nil {
		stats.created.Add(1)
		stats.newBuckets.Add(1)
		return true, false
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return true, false
	}
	countError(err, !started.Before(l.plan.timedFrom))
	return false, sessionLost(err)
}

func (l *lane) run() {
	p := l.plan
	for time.Now().Before(p.deadline) {
		kind := l.draw()
		if kind == opDelete && len(l.live) == 0 {
			kind = opCreate // the delete pool is used up: create instead, as keel bench does
		}
		var index int64
		switch kind {
		case opCreate:
			index = l.nextNode
			l.nextNode++
			if index > 0 && index%bucketNodes == 0 {
				proceed, stop := l.bucketFirst(index, time.Now())
				if stop {
					return
				}
				if !proceed {
					continue
				}
			}
		case opDelete:
			index = l.live[0]
			l.live = l.live[1:]
		}
		started := time.Now()
		err := l.issue(kind, index)
		now := time.Now()
		timed := !started.Before(p.timedFrom)
		if err != nil {
			countError(err, timed)
			if sessionLost(err) {
				return
			}
			continue
		}
		if timed {
			stats.ok.Add(1)
			stats.okByKind[kind].Add(1)
			stats.hist.record(now.Sub(started).Microseconds())
		}
		switch kind {
		case opCreate:
			stats.created.Add(1)
			if p.mix {
				l.live = append(l.live, index)
			}
		case opDelete:
			stats.deleted.Add(1)
		}
	}
}

func timedOps() int64 { return stats.ok.Load() + stats.timedErrors.Load() }

func runLine(elapsedS float64, opsPerSec int64) string {
	return fmt.Sprintf("[%5.1f s] %8d ops/s   p99 %7d µs   ops %10d   errors %d", elapsedS, opsPerSec,
		stats.hist.quantile(0.99), timedOps(), stats.timedErrors.Load())
}

// ---- main ---------------------------------------------------------------------------------------

func main() {
	log.SetOutput(io.Discard) // the library's own log lines (it also takes a logger per connection)
	cfg, err := parseArgs(os.Args[1:])
	if err != nil {
		msg := err.Error()
		if msg != "" {
			fmt.Fprintln(os.Stderr, "loadgen: "+msg)
		}
		fmt.Fprint(os.Stderr, usage)
		if msg == "" {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: "+err.Error())
		os.Exit(1)
	}
}

// progress prints keel bench's progress line once a second of the timed
// phase (bench/compare.py's RUN_LINE reads it to sample the servers' CPU)
// until the deadline or until every lane is done; returns the last tick's
// time and ok count.
func progress(p *plan, done <-chan struct{}) (time.Time, int64) {
	var lastOk int64
	lastTick := p.timedFrom
	for tick := int64(1); ; tick++ {
		at := p.timedFrom.Add(time.Duration(tick) * progressIntervalMs * time.Millisecond)
		if at.After(p.deadline) {
			return lastTick, lastOk // past the deadline: only replies still due
		}
		select {
		case <-done:
			return lastTick, lastOk
		case <-time.After(time.Until(at)):
		}
		ok := stats.ok.Load()
		secs := time.Since(lastTick).Seconds()
		if secs < 1e-3 {
			secs = 1e-3
		}
		lastTick = time.Now()
		logf("%s", runLine(float64(tick), int64(float64(ok-lastOk)/secs+0.5)))
		lastOk = ok
	}
}

func run(cfg config) error {
	mix := cfg.workload == "mix"
	root := fmt.Sprintf("/keel-goload-%x-%d", time.Now().UnixMilli(), os.Getpid())
	var pool int64
	if mix {
		pool = deletePoolTotal / int64(cfg.sessions)
		if pool > deletePoolPerLane {
			pool = deletePoolPerLane
		}
		if pool < 1 {
			pool = 1
		}
	}
	value := valueOf(cfg.valueBytes)

	// 1. Sessions: the admin session on the first server, session i on servers[i % n].
	admins, err := connectAll(cfg.servers[:1], 1)
	if err != nil {
		return err
	}
	admin := admins[0]
	sessions, err := connectAll(cfg.servers, cfg.sessions)
	if err != nil {
		admin.conn.Close()
		return err
	}
	logf("setup: %d sessions on %s, root %s", cfg.sessions, strings.Join(cfg.servers, ","), root)

	// 2. The tree, then a sync on every session so each one's server has the
	//    admin session's writes.
	setupNodes, err := createLevels(admin.conn, levels(root, mix, cfg.sessions, value, pool))
	if err != nil {
		return err
	}
	err = pipelined(sessions, func(s *session) string { return s.server }, func(s *session) error {
		_, err := s.conn.Sync(root)
		return err
	})
	if err != nil {
		return fmt.Errorf("sync failed: %v", err)
	}
	logf("setup: %d nodes created", setupNodes)

	// 3. Warm-up and timed phase: one lane per session.
	p := &plan{mix: mix, root: root, value: value, listPath: listNode(root)}
	for i := range p.dataPaths {
		p.dataPaths[i] = dataNode(root, i)
	}
	start := time.Now()
	p.timedFrom = start.Add(time.Duration(cfg.warmupS) * time.Second)
	p.deadline = p.timedFrom.Add(time.Duration(cfg.durationS) * time.Second)
	stats.running.Store(true)
	if cfg.warmupS > 0 {
		logf("warm-up: %d s, not recorded", cfg.warmupS)
	}
	var lanes sync.WaitGroup
	var stuck atomic.Int64
	stuck.Store(int64(cfg.sessions))
	for i, s := range sessions {
		lanes.Add(1)
		go func(l *lane) {
			defer lanes.Done()
			l.run()
			stuck.Add(-1)
		}(newLane(p, s.conn, i, pool))
	}
	done := make(chan struct{})
	go func() { lanes.Wait(); close(done) }()
	lastTick, lastOk := progress(p, done)
	drained := true
	select {
	case <-done:
	case <-time.After(drainTimeoutMs * time.Millisecond):
		drained = false
	}
	end := time.Now()
	stats.running.Store(false)
	if !drained {
		// Requests still without a reply: errors, never left out.
		left := stuck.Load()
		stats.timedErrors.Add(left)
		stats.errorMu.Lock()
		stats.errorKinds["NO_REPLY"] += left
		stats.errorMu.Unlock()
	}
	elapsedS := math.Max(end.Sub(p.timedFrom).Seconds(), 1e-9)
	ok := stats.ok.Load()
	logf("%s", runLine(elapsedS, int64(float64(ok-lastOk)/math.Max(end.Sub(lastTick).Seconds(), 1e-3)+0.5)))

	// 4. Close the sessions, delete the tree.
	closeAll(sessions)
	var cleaned int64
	cleanupError := ""
	if !cfg.keep {
		cleaned, err = deleteTree(admin.conn, root)
		if err != nil {
			cleanupError = err.Error()
			logf("loadgen: %s", cleanupError)
		}
	}
	admin.conn.Close()
	printSummary(cfg, root, elapsedS, setupNodes, cleaned, cleanupError)
	return nil
}

func printSummary(cfg config, root string, elapsedS float64, setupNodes, cleaned int64, cleanupError string) {
	ok := stats.ok.Load()
	var b strings.Builder
	line := func(key string, format string, v interface{}) { fmt.Fprintf(&b, "%s "+format+"\n", key, v) }
	line("workload", "%s", cfg.workload)
	line("sessions", "%d", cfg.sessions)
	line("servers", "%s", strings.Join(cfg.servers, ","))
	line("root", "%s", root)
	line("elapsed_s", "%.3f", elapsedS)
	line("TPS", "%.1f", float64(ok)/elapsedS)
	line("p50_us", "%d", stats.hist.quantile(0.50))
	line("p90_us", "%d", stats.hist.quantile(0.90))
	line("p99_us", "%d", stats.hist.quantile(0.99))
	line("p999_us", "%d", stats.hist.quantile(0.999))
	line("max_us", "%d", stats.hist.quantile(1.0))
	line("ops", "%d", timedOps())
	line("successes", "%d", ok)
	for k := 0; k < opKinds; k++ {
		line("ok_"+kindNames[k], "%d", stats.okByKind[k].Load())
	}
	line("errors", "%d", stats.timedErrors.Load()+stats.warmupErrors.Load())
	line("warmup_errors", "%d", stats.warmupErrors.Load())
	stats.errorMu.Lock()
	kinds := make([]string, 0, len(stats.errorKinds))
	for k := range stats.errorKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		line("error_"+k, "%d", stats.errorKinds[k])
	}
	stats.errorMu.Unlock()
	line("disconnects", "%d", stats.disconnects.Load())
	line("expiries", "%d", stats.expiries.Load())
	line("setup_nodes", "%d", setupNodes)
	line("created_nodes", "%d", stats.created.Load())
	line("bucket_nodes", "%d", stats.newBuckets.Load())
	line("deleted_nodes", "%d", stats.deleted.Load())
	line("kept", "%t", cfg.keep)
	line("cleaned_nodes", "%d", cleaned)
	if cleanupError != "" {
		line("cleanup_error", "%s", strings.ReplaceAll(cleanupError, "\n", " "))
	}
	fmt.Print(b.String())
}
