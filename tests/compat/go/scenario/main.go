// Command scenario is the differential compatibility scenario of Go's
// ZooKeeper client, github.com/go-zookeeper/zk v1.0.4: the pytest module
// tests/compat/test_go_compat.py runs it against Apache ZooKeeper and
// against Keel and compares what it prints.
//
// Usage: scenario HOST:PORT[,HOST:PORT...]
//
// The connect string lists every member when the server is a cluster; the
// library picks one at random, so before a session reads what ANOTHER
// session wrote it calls Sync, as a client of an ensemble must.
//
// Output, one JSON object per line, as tests/compat/java/CompatScenario.java
// prints it: {"session": NAME, "id": <int64>} registers a session id with the
// trace normaliser (tests/harness/trace.py), {"step": LABEL, "result": ...}
// records one step, and the last line is the step "done". Every wait is
// bounded and a timeout is recorded as a result. Exit status 0 once the
// scenario ran (differences are the test's business), 2 when a session
// cannot be opened, 1 on bad usage.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// The scenario's own subtree, created first and deleted at the end.
const root = "/go-compat"

const (
	// Session timeout asked for (the test servers grant 1 s to 10 s).
	sessionTimeoutMs = 10000
	// Bound on opening a session (a JVM server on a loaded 2-core machine).
	connectWaitMs = 20000
	// Bound on one step: a request the server never answers becomes a
	// recorded timeout instead of a hung scenario.
	stepTimeoutMs = 15000
	// Bound on a watch event that should come.
	eventWaitMs = 5000
	// Bound on the library shutting a session down after Close.
	closeWaitMs = 5000
	// Poll interval of the bounded waits.
	pollIntervalMs = 20
	// TTL of the TTL nodes that must outlive the run (deleted at the end).
	longTTLMs = 600000
	// TTL of the node the server must reap during the run.
	shortTTLMs = 1000
	// Bound on the server reaping an expired TTL node or an emptied
	// container (the test servers look every 100 ms).
	reapWaitMs = 10000
	// Largest TTL ZooKeeper accepts: 40 bits of milliseconds.
	maxTTLMs = 1<<40 - 1
	// Large data: well under jute.maxbuffer (1 MiB - 1), many TCP segments.
	largeDataBytes = 500 * 1024
	// Just under jute.maxbuffer once the request's header and path are added.
	nearLimitDataBytes = 1000000
	// Over jute.maxbuffer but under the library's 1.5 MiB send buffer, so
	// the request does reach the server.
	oversizedDataBytes = 1200 * 1024
	// Bound on one four-letter-word exchange.
	flwTimeoutMs = 3000
	// Bound on the lock recipe handing the lock over.
	lockWaitMs = 5000
	// Bound on the library resuming a session after the server dropped its
	// connection (the library waits 1 s before it tries the same server again).
	resumeWaitMs = 8000
)

const (
	exitUsage        = 1
	exitNoConnection = 2
)

type obj = map[string]any

var openACL = zk.WorldACL(zk.PermAll)

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// ------------------------------------------------------------ output

var out = newEncoder()

func newEncoder() *json.Encoder {
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	return enc
}

func emit(v obj) {
	if err := out.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "scenario: cannot write:", err)
	}
}

func record(label string, result any) { emit(obj{"step": label, "result": result}) }

// ZooKeeper's error codes by the names the Java client gives them
// (KeeperException.Code); -9, -116 and -117 exist only in the C client and
// in this library, named as the C client does.
var codeNames = map[int32]string{
	0: "OK", -1: "SYSTEMERROR", -2: "RUNTIMEINCONSISTENCY", -3: "DATAINCONSISTENCY",
	-4: "CONNECTIONLOSS", -5: "MARSHALLINGERROR", -6: "UNIMPLEMENTED", -7: "OPERATIONTIMEOUT",
	-8: "BADARGUMENTS", -9: "INVALIDSTATE", -12: "UNKNOWNSESSION", -13: "NEWCONFIGNOQUORUM",
	-14: "RECONFIGINPROGRESS", -100: "APIERROR", -101: "NONODE", -102: "NOAUTH", -103: "BADVERSION",
	-108: "NOCHILDRENFOREPHEMERALS", -110: "NODEEXISTS", -111: "NOTEMPTY", -112: "SESSIONEXPIRED",
	-113: "INVALIDCALLBACK", -114: "INVALIDACL", -115: "AUTHFAILED", -116: "CLOSING", -117: "NOTHING",
	-118: "SESSIONMOVED", -119: "NOTREADONLY", -120: "EPHEMERALONLOCALSESSION", -121: "NOWATCHER",
	-122: "REQUESTTIMEOUT", -123: "RECONFIGDISABLED", -124: "SESSIONCLOSEDREQUIRESASLAUTH",
	-125: "QUOTAEXCEEDED", -127: "THROTTLEDOP",
}

// The library's error values for server codes (its errCodeToError).
var libraryErrors = []struct {
	err  error
	code int32
}{
	{zk.ErrAPIError, -100}, {zk.ErrNoNode, -101}, {zk.ErrNoAuth, -102}, {zk.ErrBadVersion, -103},
	{zk.ErrNoChildrenForEphemerals, -108}, {zk.ErrNodeExists, -110}, {zk.ErrNotEmpty, -111},
	{zk.ErrSessionExpired, -112}, {zk.ErrInvalidACL, -114}, {zk.ErrAuthFailed, -115},
	{zk.ErrClosing, -116}, {zk.ErrNothing, -117}, {zk.ErrSessionMoved, -118},
	{zk.ErrReconfigDisabled, -123}, {zk.ErrBadArguments, -8},
}

// The library reports the codes it has no error value for this way.
var unknownCode = regexp.MustCompile(`^unknown error: (-?\d+)$`)

func serverCode(err error) (int32, bool) {
	for _, e := range libraryErrors {
		if errors.Is(err, e.err) {
			return e.code, true
		}
	}
	if m := unknownCode.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 32)
		return int32(n), true
	}
	return 0, false
}

// A lost connection shows as the library's ErrConnectionClosed or as the
// socket's own error, whichever comes first; both name addresses or
// timing, so they are all recorded as the one CONNECTIONLOSS.
func connectionLoss(err error) bool {
	var netErr net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.As(err, &netErr)
}

func errJSON(err error) obj {
	if err == nil {
		return nil
	}
	if code, ok := serverCode(err); ok {
		name, known := codeNames[code]
		if !known {
			name = "UNKNOWN"
		}
		return obj{"err": name, "code": code}
	}
	if connectionLoss(err) {
		return obj{"err": "CONNECTIONLOSS", "client": true}
	}
	// Client-side refusals (invalid path, flags, op types): the message
	// is the library's own and deterministic.
	return obj{"client": err.Error()}
}

func statJSON(st *zk.Stat) any {
	if st == nil {
		return nil
	}
	return obj{"stat": obj{
		"czxid": st.Czxid, "mzxid": st.Mzxid, "pzxid": st.Pzxid, "ctime": st.Ctime, "mtime": st.Mtime,
		"version": st.Version, "cversion": st.Cversion, "aversion": st.Aversion,
		"ephemeralOwner": st.EphemeralOwner, "dataLength": st.DataLength, "numChildren": st.NumChildren,
	}}
}

func dataJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return obj{"bytes": string(b)}
}

func aclJSON(acl []zk.ACL) []any {
	l := []any{}
	for _, a := range acl {
		l = append(l, obj{"acl": []any{a.Perms, a.Scheme, a.ID}})
	}
	return l
}

func eventJSON(ev zk.Event) obj {
	e := obj{"type": ev.Type.String(), "state": ev.State.String(), "path": guidless(ev.Path)}
	if ev.Err != nil {
		e["err"] = errJSON(ev.Err)
	}
	return e
}

// The protected-node prefix holds a random GUID: _c_<32 hex>-.
var protectedGUID = regexp.MustCompile(`_c_[0-9a-f]{32}-`)

func guidless(path string) string { return protectedGUID.ReplaceAllString(path, "_c_<guid>-") }

func sorted(l []string) []string {
	c := []string{}
	for _, s := range l {
		c = append(c, guidless(s))
	}
	sort.Strings(c)
	return c
}

// ------------------------------------------------------------ steps

type outcome struct {
	value any
	err   error
}

// watched is what a step setting a watch returns: the value recorded and
// the library's channel for the watch.
type watched struct {
	value any
	ch    <-chan zk.Event
}

// step runs op with a deadline and records {"ok": value}, {"error": ...}
// (plus "results" when op returned a value with its error: multi), or a
// timeout. Returns op's value, nil when it failed.
func step(label string, op func() (any, error)) any {
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		v, err := op()
		done <- outcome{v, err}
	}()
	select {
	case o := <-done:
		record(label, resultJSON(o))
		if o.err != nil {
			return nil
		}
		return o.value
	case <-time.After(ms(stepTimeoutMs)):
		record(label, obj{"error": obj{"timeout_ms": stepTimeoutMs}})
		return nil
	}
}

func resultJSON(o outcome) obj {
	v := o.value
	if w, ok := v.(watched); ok {
		v = w.value
	}
	if o.err == nil {
		return obj{"ok": v}
	}
	r := obj{"error": errJSON(o.err)}
	if v != nil {
		r["results"] = v
	}
	return r
}

// stepWatch is step for an op that sets a watch; returns the watch's
// channel (nil when none was set).
func stepWatch(label string, op func() (watched, error)) <-chan zk.Event {
	v := step(label, func() (any, error) {
		w, err := op()
		if err != nil {
			return nil, err
		}
		return w, nil
	})
	if w, ok := v.(watched); ok {
		return w.ch
	}
	return nil
}

// waitFor polls cond until it holds or timeoutMs pass.
func waitFor(timeoutMs int64, cond func() bool) bool {
	deadline := time.Now().Add(ms(timeoutMs))
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(ms(pollIntervalMs))
	}
}

// bounded is cond run with the step deadline: false when it does not
// return in time (a request the server never answers).
func bounded(cond func() bool) bool {
	done := make(chan bool, 1)
	go func() { done <- cond() }()
	select {
	case ok := <-done:
		return ok
	case <-time.After(ms(stepTimeoutMs)):
		return false
	}
}

// waitEvent is the event a watch delivers within eventWaitMs.
func waitEvent(ch <-chan zk.Event) any {
	if ch == nil {
		return "no watch"
	}
	select {
	case ev, ok := <-ch:
		if !ok {
			return "channel closed"
		}
		return eventJSON(ev)
	case <-time.After(ms(eventWaitMs)):
		return obj{"timeout_ms": eventWaitMs}
	}
}

// pending is the event a watch has already delivered, if any: only
// meaningful after barrier().
func pending(ch <-chan zk.Event) any {
	if ch == nil {
		return "no watch"
	}
	select {
	case ev, ok := <-ch:
		if !ok {
			return "channel closed"
		}
		return eventJSON(ev)
	default:
		return "none"
	}
}

// ------------------------------------------------------------ sessions

type session struct {
	name   string
	conn   *zk.Conn
	mu     sync.Mutex
	states []string // session state changes, in order
	wire   []obj    // node events as they came off the wire
	closed chan struct{}
}

// sessionNames maps the ids of the scenario's sessions to their names.
var sessionNames = map[int64]string{}

func open(name string, servers []string) (*session, error) {
	s := &session{name: name, closed: make(chan struct{})}
	conn, events, err := zk.Connect(servers, ms(sessionTimeoutMs),
		zk.WithLogInfo(false), zk.WithEventCallback(s.onEvent))
	if err != nil {
		return nil, err
	}
	s.conn = conn
	// The callback sees every event in order and never drops one (the
	// channel does when full); the channel is only drained, so that its
	// closing tells when the library has shut the session down.
	go func() {
		for range events {
		}
		close(s.closed)
	}()
	if !waitFor(connectWaitMs, func() bool { return s.lastState() == zk.StateHasSession.String() }) {
		conn.Close()
		return nil, fmt.Errorf("session %s: none within %d ms", name, connectWaitMs)
	}
	sessionNames[conn.SessionID()] = name
	emit(obj{"session": name, "id": conn.SessionID()})
	return s, nil
}

func mustOpen(name string, servers []string) *session {
	s, err := open(name, servers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenario: cannot connect:", err)
		os.Exit(exitNoConnection)
	}
	return s
}

// onEvent runs on the library's receive loop: it must not block.
func (s *session) onEvent(ev zk.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Type == zk.EventSession {
		s.states = append(s.states, ev.State.String())
	} else {
		s.wire = append(s.wire, eventJSON(ev))
	}
}

func (s *session) lastState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.states) == 0 {
		return ""
	}
	return s.states[len(s.states)-1]
}

func (s *session) takeStates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := append([]string{}, s.states...)
	s.states = nil
	return l
}

// waitResumed waits until the session has lost its connection and has its
// session back, and returns the state changes since the last takeStates.
func (s *session) waitResumed() ([]string, bool) {
	down, up := zk.StateDisconnected.String(), zk.StateHasSession.String()
	ok := waitFor(resumeWaitMs, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		seenDown := false
		for _, st := range s.states {
			seenDown = seenDown || st == down
			if seenDown && st == up {
				return true
			}
		}
		return false
	})
	return s.takeStates(), ok
}

// takeWire returns the node events received since the last call; complete
// only after barrier().
func (s *session) takeWire() []obj {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := append([]obj{}, s.wire...)
	s.wire = nil
	return l
}

// barrier returns once every notification the server sent before now has
// been delivered: the sync makes this session's server apply every write
// committed before it (a no-op on one server), and the library handles
// notifications and replies in order on one loop, so the reply to the
// later exists comes after them.
func (s *session) barrier() error {
	if _, err := s.conn.Sync("/"); err != nil {
		return err
	}
	_, _, err := s.conn.Exists("/")
	return err
}

// recordBarrier runs barrier as a step only when it fails, so that a
// broken sync shows without adding a step to every run.
func (s *session) recordBarrier(label string) {
	done := make(chan error, 1)
	go func() { done <- s.barrier() }()
	select {
	case err := <-done:
		if err != nil {
			record(label+" (barrier)", obj{"error": errJSON(err)})
		}
	case <-time.After(ms(stepTimeoutMs)):
		record(label+" (barrier)", obj{"error": obj{"timeout_ms": stepTimeoutMs}})
	}
}

// ------------------------------------------------------------ operations

func create(c *zk.Conn, path string, data []byte, flags int32, acl []zk.ACL) func() (any, error) {
	return func() (any, error) {
		p, err := c.Create(path, data, flags, acl)
		if err != nil {
			return nil, err
		}
		return guidless(p), nil
	}
}

func get(c *zk.Conn, path string) func() (any, error) {
	return func() (any, error) {
		d, st, err := c.Get(path)
		if err != nil {
			return nil, err
		}
		return obj{"data": dataJSON(d), "stat": statJSON(st)}, nil
	}
}

func set(c *zk.Conn, path string, data []byte, version int32) func() (any, error) {
	return func() (any, error) {
		st, err := c.Set(path, data, version)
		if err != nil {
			return nil, err
		}
		return statJSON(st), nil
	}
}

func exists(c *zk.Conn, path string) func() (any, error) {
	return func() (any, error) {
		ok, st, err := c.Exists(path)
		if err != nil {
			return nil, err
		}
		return obj{"exists": ok, "stat": statJSON(st)}, nil
	}
}

func del(c *zk.Conn, path string, version int32) func() (any, error) {
	return func() (any, error) {
		if err := c.Delete(path, version); err != nil {
			return nil, err
		}
		return true, nil
	}
}

func children(c *zk.Conn, path string) func() (any, error) {
	return func() (any, error) {
		l, st, err := c.Children(path)
		if err != nil {
			return nil, err
		}
		return obj{"children": sorted(l), "stat": statJSON(st)}, nil
	}
}

func getACL(c *zk.Conn, path string) func() (any, error) {
	return func() (any, error) {
		acl, st, err := c.GetACL(path)
		if err != nil {
			return nil, err
		}
		return obj{"acl": aclJSON(acl), "stat": statJSON(st)}, nil
	}
}

func setACL(c *zk.Conn, path string, acl []zk.ACL, version int32) func() (any, error) {
	return func() (any, error) {
		st, err := c.SetACL(path, acl, version)
		if err != nil {
			return nil, err
		}
		return statJSON(st), nil
	}
}

func addAuth(c *zk.Conn, scheme, auth string) func() (any, error) {
	return func() (any, error) {
		if err := c.AddAuth(scheme, []byte(auth)); err != nil {
			return nil, err
		}
		return true, nil
	}
}

func syncPath(c *zk.Conn, path string) func() (any, error) {
	return func() (any, error) {
		p, err := c.Sync(path)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

func getW(c *zk.Conn, path string) func() (watched, error) {
	return func() (watched, error) {
		d, st, ch, err := c.GetW(path)
		return watched{obj{"data": dataJSON(d), "stat": statJSON(st)}, ch}, err
	}
}

func existsW(c *zk.Conn, path string) func() (watched, error) {
	return func() (watched, error) {
		ok, st, ch, err := c.ExistsW(path)
		return watched{obj{"exists": ok, "stat": statJSON(st)}, ch}, err
	}
}

func childrenW(c *zk.Conn, path string) func() (watched, error) {
	return func() (watched, error) {
		l, st, ch, err := c.ChildrenW(path)
		return watched{obj{"children": sorted(l), "stat": statJSON(st)}, ch}, err
	}
}

func multi(c *zk.Conn, ops ...any) func() (any, error) {
	return func() (any, error) {
		res, err := c.Multi(ops...)
		if res == nil {
			return nil, err
		}
		l := []any{}
		for _, r := range res {
			l = append(l, obj{"path": guidless(r.String), "stat": statJSON(r.Stat), "err": errJSON(r.Error)})
		}
		return l, err
	}
}

// done is the result of an op whose only outcome is its error.
func done(err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return true, nil
}

// bulk is deterministic text data of n bytes.
func bulk(n int) []byte {
	const pattern = "0123456789abcdefghijklmnopqrstuvwxyz\n"
	return bytes.Repeat([]byte(pattern), n/len(pattern)+1)[:n]
}

func digest(b []byte) obj {
	sum := sha256.Sum256(b)
	return obj{"length": len(b), "sha256": hex.EncodeToString(sum[:])}
}

// ------------------------------------------------------------ scenario

type scenario struct {
	servers []string
	a, b    *session // A writes, B watches and reads
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: scenario HOST:PORT[,HOST:PORT...]")
		os.Exit(exitUsage)
	}
	s := &scenario{servers: strings.Split(os.Args[1], ",")}
	s.a = mustOpen("A", s.servers)
	s.b = mustOpen("B", s.servers)
	s.sessionReporting()
	s.fourLetterWords()
	s.createModes()
	s.invalidPaths()
	s.readsAndVersions()
	s.watches()
	s.multis()
	s.acls()
	s.unknownAuthScheme()
	s.syncs()
	s.largeData()
	s.oversizedRequest()
	s.lockRecipe()
	s.ephemeralsOnClose()
	s.reaping()
	s.cleanup()
	record("done", true)
}

func (s *scenario) sessionReporting() {
	record("A session states at connect", s.a.takeStates())
	record("B session states at connect", s.b.takeStates())
	record("A state", s.a.conn.State().String())
	record("A session id", obj{"sessionId": s.a.conn.SessionID()})
	record("B session id", obj{"sessionId": s.b.conn.SessionID()})
	record("A server is in the connect string", contains(s.servers, s.a.conn.Server()))
}

func contains(l []string, x string) bool {
	for _, y := range l {
		if y == x {
			return true
		}
	}
	return false
}

func (s *scenario) createModes() {
	a := s.a.conn
	step("create root", create(a, root, []byte("go"), zk.FlagPersistent, openACL))
	step("create root again", create(a, root, []byte("go"), zk.FlagPersistent, openACL))
	step("get root", get(a, root))
	step("create persistent", create(a, root+"/p", []byte("p"), zk.FlagPersistent, openACL))
	step("create nil data", create(a, root+"/nil", nil, zk.FlagPersistent, openACL))
	step("get nil data", get(a, root+"/nil"))
	step("create empty data", create(a, root+"/empty", []byte{}, zk.FlagPersistent, openACL))
	step("get empty data", get(a, root+"/empty"))
	var last any
	for i := 0; i < 3; i++ {
		last = step(fmt.Sprintf("create sequential %d", i), create(a, root+"/seq-", []byte(strconv.Itoa(i)), zk.FlagSequence, openACL))
	}
	if p, ok := last.(string); ok {
		step("delete last sequential", del(a, p, -1))
	}
	step("create sequential after delete", create(a, root+"/seq-", nil, zk.FlagSequence, openACL))
	step("create ephemeral", create(a, root+"/eph", []byte("e"), zk.FlagEphemeral, openACL))
	step("exists ephemeral", exists(a, root+"/eph"))
	step("create ephemeral sequential", create(a, root+"/eseq-", []byte("e"), zk.FlagEphemeralSequential, openACL))
	step("create protected ephemeral sequential", func() (any, error) {
		p, err := a.CreateProtectedEphemeralSequential(root+"/prot-", []byte("x"), openACL)
		if err != nil {
			return nil, err
		}
		return guidless(p), nil
	})
	step("create child of ephemeral", create(a, root+"/eph/c", nil, zk.FlagPersistent, openACL))
	step("create under missing parent", create(a, root+"/missing/c", nil, zk.FlagPersistent, openACL))
	step("create sdir", create(a, root+"/sdir", nil, zk.FlagPersistent, openACL))
	step("create sequential with trailing slash", create(a, root+"/sdir/", nil, zk.FlagSequence, openACL))
	step("create with unknown flag (client-side)", create(a, root+"/flag9", nil, 9, openACL))
	s.containersAndTTL()
	step("children of root", children(a, root))
}

// Reaped nodes live under /reap, whose stat no step records before the
// reaping is over: a reap is a write at a time of the server's choosing,
// and it moves its parent's cversion (the next sequence number) and pzxid.
func (s *scenario) containersAndTTL() {
	a := s.a.conn
	step("create reap dir", create(a, root+"/reap", nil, zk.FlagPersistent, openACL))
	step("create container", func() (any, error) {
		p, err := a.CreateContainer(root+"/reap/cont", []byte("c"), zk.FlagContainer, openACL)
		if err != nil {
			return nil, err
		}
		return p, nil
	})
	step("exists container", exists(a, root+"/reap/cont"))
	step("create container without container flag (client-side)", func() (any, error) {
		p, err := a.CreateContainer(root+"/cont2", nil, zk.FlagPersistent, openACL)
		if err != nil {
			return nil, err
		}
		return p, nil
	})
	step("create with container flag through Create", create(a, root+"/reap/cont3", nil, zk.FlagContainer, openACL))
	step("exists container made through Create", exists(a, root+"/reap/cont3"))
	step("create TTL", createTTL(a, root+"/ttl", zk.FlagTTL, longTTLMs))
	step("exists TTL", exists(a, root+"/ttl"))
	step("create TTL sequential", createTTL(a, root+"/ttlseq-", zk.FlagPersistentSequentialWithTTL, longTTLMs))
	step("create TTL with ttl 0", createTTL(a, root+"/ttl0", zk.FlagTTL, 0))
	step("create TTL with ttl -1", createTTL(a, root+"/ttlneg", zk.FlagTTL, -1))
	step("create TTL with the largest ttl", createTTL(a, root+"/ttlmax", zk.FlagTTL, maxTTLMs))
	step("exists TTL with the largest ttl", exists(a, root+"/ttlmax"))
	step("create TTL over the largest ttl", createTTL(a, root+"/ttlover", zk.FlagTTL, maxTTLMs+1))
	step("create TTL without TTL flag (client-side)", createTTL(a, root+"/ttlx", zk.FlagPersistent, longTTLMs))
	step("create with TTL flag through Create (client-side)", create(a, root+"/ttly", nil, zk.FlagTTL, openACL))
	step("create short TTL", createTTL(a, root+"/reap/ttl-short", zk.FlagTTL, shortTTLMs))
}

func createTTL(c *zk.Conn, path string, flags int32, ttlMs int64) func() (any, error) {
	return func() (any, error) {
		p, err := c.CreateTTL(path, nil, flags, openACL, ms(ttlMs))
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

func (s *scenario) invalidPaths() {
	a := s.a.conn
	// Refused by the library before anything is sent.
	for _, p := range []string{"", "go-compat", root + "/", root + "//x", root + "/.", root + "/..",
		root + "/./x", root + "/../x", root + "/a\x00b", root + "/a\x01b", root + "/\u0085", root + "/\uf000"} {
		step(fmt.Sprintf("create %q (client-side)", p), create(a, p, nil, zk.FlagPersistent, openACL))
	}
	// Accepted by the library, refused by ZooKeeper's PathUtils: private-use
	// characters outside the library's range, U+FFFF, and a character
	// outside the BMP (a surrogate pair in Java's UTF-16).
	for _, p := range []string{root + "/\ue000", root + "/\uffff", root + "/\U0001F600"} {
		step(fmt.Sprintf("create %q", p), create(a, p, nil, zk.FlagPersistent, openACL))
		step(fmt.Sprintf("exists %q", p), exists(a, p))
		step(fmt.Sprintf("set %q", p), set(a, p, []byte("x"), -1))
		step(fmt.Sprintf("delete %q", p), del(a, p, -1))
	}
	// Dots that are names, not relative steps.
	step(`create "..."`, create(a, root+"/...", nil, zk.FlagPersistent, openACL))
	step(`create ".x"`, create(a, root+"/.x", nil, zk.FlagPersistent, openACL))
	step("create non-ASCII name", create(a, root+"/é-ü", []byte("ü"), zk.FlagPersistent, openACL))
	step("get non-ASCII name", get(a, root+"/é-ü"))
}

func (s *scenario) readsAndVersions() {
	a := s.a.conn
	v := root + "/v"
	step("create v", create(a, v, []byte("0"), zk.FlagPersistent, openACL))
	step("get v", get(a, v))
	step("set v version 0", set(a, v, []byte("1"), 0))
	step("set v stale version 0", set(a, v, []byte("x"), 0))
	step("set v version -1", set(a, v, []byte("2"), -1))
	step("set v version 2", set(a, v, []byte("3"), 2))
	step("set v version 9", set(a, v, []byte("x"), 9))
	step("set v nil data", set(a, v, nil, -1))
	step("get v after sets", get(a, v))
	step("set missing node", set(a, root+"/nope", []byte("x"), -1))
	step("get missing node", get(a, root+"/nope"))
	step("exists v", exists(a, v))
	step("exists missing node", exists(a, root+"/nope"))
	step("exists root /", exists(a, "/"))
	// Children only: an ensemble's /zookeeper/config differs from a
	// standalone server's (tests/compat/topology.py).
	step("children of /zookeeper", func() (any, error) {
		l, _, err := a.Children("/zookeeper")
		if err != nil {
			return nil, err
		}
		return sorted(l), nil
	})
	step("children of leaf", children(a, v))
	step("children of missing node", children(a, root+"/nope"))
	step("delete v bad version", del(a, v, 3))
	step("delete non-empty root", del(a, root, -1))
	step("delete missing node", del(a, root+"/nope", -1))
	step("delete v version 4", del(a, v, 4))
	step("get v after delete", get(a, v))
}

func (s *scenario) watches() {
	a, b := s.a.conn, s.b.conn
	w := root + "/w"
	step("create w", create(a, w, []byte("0"), zk.FlagPersistent, openACL))
	step("B sync", syncPath(b, root))
	s.b.takeWire()

	ch := stepWatch("existsW absent wc", existsW(b, w+"c"))
	step("create wc", create(a, w+"c", nil, zk.FlagPersistent, openACL))
	record("event existsW absent -> created", waitEvent(ch))

	ch = stepWatch("getW w", getW(b, w))
	step("set w", set(a, w, []byte("1"), -1))
	record("event getW -> data changed", waitEvent(ch))

	ch = stepWatch("existsW present w", existsW(b, w))
	step("set w again", set(a, w, []byte("2"), -1))
	record("event existsW present -> data changed", waitEvent(ch))

	ch = stepWatch("childrenW w", childrenW(b, w))
	step("create w/c1", create(a, w+"/c1", []byte("c"), zk.FlagPersistent, openACL))
	record("event childrenW -> child created", waitEvent(ch))

	ch = stepWatch("childrenW w again", childrenW(b, w))
	step("set w/c1 (no children change)", set(a, w+"/c1", []byte("d"), -1))
	s.b.recordBarrier("child data change")
	record("childrenW after a child's data change", pending(ch))
	step("create w/c2", create(a, w+"/c2", nil, zk.FlagPersistent, openACL))
	record("event childrenW -> second child created", waitEvent(ch))

	s.deleteFiresEveryWatch()
	s.sameWatchTwice()

	step("getW missing node", func() (any, error) {
		_, _, ch, err := b.GetW(root + "/nope")
		return obj{"watch": ch != nil}, err
	})
	step("childrenW missing node", func() (any, error) {
		_, _, ch, err := b.ChildrenW(root + "/nope")
		return obj{"watch": ch != nil}, err
	})
	step("create nope (no watch left)", create(a, root+"/nope", nil, zk.FlagPersistent, openACL))
	step("delete nope", del(a, root+"/nope", -1))
	s.b.recordBarrier("watches")
	record("B node events on the wire", s.b.takeWire())
}

// A delete fires data, exists and child watches of the node: one
// notification on the wire, which the library hands to all three.
func (s *scenario) deleteFiresEveryWatch() {
	a, b := s.a.conn, s.b.conn
	c1 := root + "/w/c1"
	s.b.recordBarrier("before delete")
	s.b.takeWire()
	dataCh := stepWatch("getW w/c1", getW(b, c1))
	existsCh := stepWatch("existsW w/c1", existsW(b, c1))
	childCh := stepWatch("childrenW w/c1", childrenW(b, c1))
	parentCh := stepWatch("childrenW w before delete", childrenW(b, root+"/w"))
	step("delete w/c1", del(a, c1, -1))
	record("events of delete w/c1", obj{
		"data": waitEvent(dataCh), "exists": waitEvent(existsCh),
		"children": waitEvent(childCh), "parent": waitEvent(parentCh),
	})
	s.b.recordBarrier("delete")
	record("B node events on the wire for delete", s.b.takeWire())
}

// Two GetW on one path: the server keeps one watch, the library two
// channels; one set fires both, once.
func (s *scenario) sameWatchTwice() {
	a, b := s.a.conn, s.b.conn
	w := root + "/w"
	first := stepWatch("getW w first", getW(b, w))
	second := stepWatch("getW w second", getW(b, w))
	step("set w third time", set(a, w, []byte("3"), -1))
	record("events of two getW", obj{"first": waitEvent(first), "second": waitEvent(second)})
	step("set w fourth time (watch used up)", set(a, w, []byte("4"), -1))
	s.b.recordBarrier("two getW")
	record("B node events on the wire for two getW", s.b.takeWire())
}

func (s *scenario) multis() {
	a := s.a.conn
	m := root + "/m"
	step("multi ok", multi(a,
		&zk.CreateRequest{Path: m, Data: []byte("m"), Acl: openACL, Flags: zk.FlagPersistent},
		&zk.CreateRequest{Path: m + "/s-", Acl: openACL, Flags: zk.FlagSequence},
		&zk.CreateRequest{Path: m + "/e", Acl: openACL, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: m, Data: []byte("n"), Version: 0},
		&zk.CheckVersionRequest{Path: m, Version: 1},
		&zk.DeleteRequest{Path: root + "/p", Version: -1},
	))
	step("get m after multi", get(a, m))
	step("children of m after multi", children(a, m))
	step("multi failing on check", multi(a,
		&zk.CreateRequest{Path: root + "/m2", Acl: openACL, Flags: zk.FlagPersistent},
		&zk.CheckVersionRequest{Path: m, Version: 7},
		&zk.DeleteRequest{Path: m + "/e", Version: -1},
	))
	step("exists m2 after failed multi", exists(a, root+"/m2"))
	step("multi failing on existing node", multi(a,
		&zk.SetDataRequest{Path: m, Data: []byte("o"), Version: -1},
		&zk.CreateRequest{Path: m, Acl: openACL, Flags: zk.FlagPersistent},
	))
	step("multi failing on non-empty delete", multi(a, &zk.DeleteRequest{Path: m, Version: -1}))
	step("multi failing on check of missing node", multi(a, &zk.CheckVersionRequest{Path: root + "/nope", Version: 0}))
	step("multi failing on bad version set", multi(a,
		&zk.CreateRequest{Path: root + "/m3", Acl: openACL, Flags: zk.FlagPersistent},
		&zk.SetDataRequest{Path: root + "/m3", Data: []byte("x"), Version: 5},
	))
	step("multi with empty ACL", multi(a, &zk.CreateRequest{Path: root + "/m4", Flags: zk.FlagPersistent}))
	step("multi with invalid path", multi(a, &zk.CreateRequest{Path: root + "/\ue000", Acl: openACL}))
	step("multi create with TTL flag", multi(a, &zk.CreateRequest{Path: root + "/m5", Acl: openACL, Flags: zk.FlagTTL}))
	// ZooKeeper answers with a create2 result (path and Stat), which this
	// library cannot decode: it reports APIERROR, yet the node is created.
	step("multi create with container flag", multi(a, &zk.CreateRequest{Path: root + "/reap/m6", Acl: openACL, Flags: zk.FlagContainer}))
	step("multi create under ephemeral", multi(a, &zk.CreateRequest{Path: m + "/e/x", Acl: openACL}))
	step("multi empty", multi(a))
	step("multi with CreateTTLRequest (client-side)", multi(a, &zk.CreateTTLRequest{Path: root + "/m7", Acl: openACL, Flags: zk.FlagTTL, Ttl: longTTLMs}))
	step("get m at end", get(a, m))
}

func (s *scenario) acls() {
	a, b := s.a.conn, s.b.conn
	n := root + "/acl"
	step("getACL root", getACL(a, root))
	step("create acl node", create(a, n, []byte("a"), zk.FlagPersistent, openACL))
	step("setACL bad version", setACL(a, n, zk.WorldACL(zk.PermRead), 5))
	step("setACL read-only", setACL(a, n, zk.WorldACL(zk.PermRead), 0))
	step("getACL after setACL", getACL(a, n))
	step("set read-only node", set(a, n, []byte("x"), -1))
	step("create child of read-only node", create(a, n+"/c", nil, zk.FlagPersistent, openACL))
	step("get read-only node", get(a, n))
	step("create with empty ACL", create(a, root+"/noacl", nil, zk.FlagPersistent, []zk.ACL{}))
	step("create with unknown ACL scheme", create(a, root+"/badscheme", nil, zk.FlagPersistent, []zk.ACL{{Perms: zk.PermAll, Scheme: "bogus", ID: "x"}}))
	step("create with malformed digest id", create(a, root+"/baddigest", nil, zk.FlagPersistent, []zk.ACL{{Perms: zk.PermAll, Scheme: "digest", ID: "nocolon"}}))
	step("create with auth ACL without auth", create(b, root+"/authnone", nil, zk.FlagPersistent, zk.AuthACL(zk.PermAll)))
	step("create with ip ACL of this host", create(a, root+"/iphere", []byte("i"), zk.FlagPersistent, []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: "127.0.0.1"}}))
	step("get ip ACL node of this host", get(a, root+"/iphere"))
	step("create with ip ACL of another net", create(a, root+"/ipthere", []byte("i"), zk.FlagPersistent, []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: "10.0.0.0/8"}}))
	step("get ip ACL node of another net", get(a, root+"/ipthere"))
	step("create with malformed ip ACL", create(a, root+"/ipbad", nil, zk.FlagPersistent, []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: "not-an-ip"}}))
	s.digestACLs()
}

func (s *scenario) digestACLs() {
	b := s.b.conn
	secret := root + "/secret"
	c := mustOpen("Auth", s.servers)
	defer c.conn.Close()
	step("addauth digest", addAuth(c.conn, "digest", "gouser:gopw"))
	step("create digest node", create(c.conn, secret, []byte("s"), zk.FlagPersistent, zk.DigestACL(zk.PermAll, "gouser", "gopw")))
	step("B sync for secret", syncPath(b, root))
	step("get digest node without auth", get(b, secret))
	step("set digest node without auth", set(b, secret, []byte("x"), -1))
	step("getACL digest node without auth", getACL(b, secret))
	step("delete digest node's child without auth", del(b, secret+"/c", -1))
	step("get digest node with auth", get(c.conn, secret))
	step("getACL digest node", getACL(c.conn, secret))
	step("set digest node with auth", set(c.conn, secret, []byte("t"), 0))
	step("create auth-ACL node", create(c.conn, root+"/authacl", nil, zk.FlagPersistent, zk.AuthACL(zk.PermAll)))
	step("getACL auth-ACL node", getACL(c.conn, root+"/authacl"))
	step("addauth second identity", addAuth(c.conn, "digest", "other:pw2"))
	step("create auth-ACL node with two identities", create(c.conn, root+"/authacl2", nil, zk.FlagPersistent, zk.AuthACL(zk.PermRead|zk.PermWrite)))
	step("getACL auth-ACL node with two identities", getACL(c.conn, root+"/authacl2"))
	step("B addauth wrong password", addAuth(b, "digest", "gouser:wrong"))
	step("get digest node with wrong password", get(b, secret))
	step("setACL digest node without admin", setACL(b, secret, openACL, -1))

	su := mustOpen("Super", s.servers)
	defer su.conn.Close()
	step("addauth super", addAuth(su.conn, "digest", "super:test"))
	step("Super sync", syncPath(su.conn, root))
	step("super get digest node", get(su.conn, secret))
	step("super set digest node", set(su.conn, secret, []byte("u"), -1))
	step("super get ip ACL node of another net", get(su.conn, root+"/ipthere"))
}

// An auth scheme the server does not know: AUTHFAILED, then the server
// drops the connection but not the session, which the library resumes.
func (s *scenario) unknownAuthScheme() {
	bad := mustOpen("Bad", s.servers)
	defer bad.conn.Close()
	bad.takeStates()
	step("addauth unknown scheme", addAuth(bad.conn, "nosuchscheme", "x"))
	states, resumed := bad.waitResumed()
	record("session resumed after AUTHFAILED", obj{"resumed": resumed, "states": states})
	record("session id kept after AUTHFAILED", obj{"sessionId": bad.conn.SessionID()})
	step("Bad sync", syncPath(bad.conn, root))
	step("exists root after AUTHFAILED", exists(bad.conn, root))
}

func (s *scenario) syncs() {
	a := s.a.conn
	step("sync root", syncPath(a, root))
	step("sync /", syncPath(a, "/"))
	step("sync missing node", syncPath(a, root+"/nope"))
	step("sync invalid path (client-side)", syncPath(a, "nope"))
}

// The library's four-letter-word helpers parse srvr and cons with regular
// expressions, so they see the servers' exact text formats; only what does
// not depend on the topology or on timing is recorded. (FLWSrvr's pattern
// wants the ZooKeeper 3.4 "built on MM/dd/yyyy" date, so it fails on
// ZooKeeper 3.8's "built on yyyy-MM-dd"; FLWCons lists a client only when
// its cons line has every field ZooKeeper prints.)
func (s *scenario) fourLetterWords() {
	timeout := ms(flwTimeoutMs)
	oks := zk.FLWRuok(s.servers, timeout)
	all := len(oks) > 0
	for _, ok := range oks {
		all = all && ok
	}
	record("FLWRuok all imok", all)

	stats, ok := zk.FLWSrvr(s.servers, timeout)
	outcomes := map[string]bool{}
	for _, st := range stats {
		switch {
		case st.Error != nil:
			outcomes["error: "+st.Error.Error()] = true
		case st.Mode == zk.ModeUnknown:
			outcomes["unknown mode"] = true
		default:
			outcomes["parsed"] = true
		}
	}
	record("FLWSrvr", obj{"ok": ok, "outcomes": sortedKeys(outcomes)})

	clients, ok := zk.FLWCons(s.servers, timeout)
	found := map[string]bool{}
	errs := map[string]bool{}
	for _, sc := range clients {
		if sc.Error != nil {
			errs[sc.Error.Error()] = true
		}
		for _, c := range sc.Clients {
			if name, known := sessionNames[c.SessionID]; known {
				found[name] = true
			}
		}
	}
	record("FLWCons", obj{"ok": ok, "errors": sortedKeys(errs), "sessions": sortedKeys(found)})
}

func sortedKeys(m map[string]bool) []string {
	l := []string{}
	for k := range m {
		l = append(l, k)
	}
	sort.Strings(l)
	return l
}

func (s *scenario) largeData() {
	a, b := s.a.conn, s.b.conn
	big := root + "/big"
	data := bulk(largeDataBytes)
	step("create large node", create(a, big, data, zk.FlagPersistent, openACL))
	step("B sync for large node", syncPath(b, root))
	step("B get large node", func() (any, error) {
		d, st, err := b.Get(big)
		if err != nil {
			return nil, err
		}
		return obj{"data": digest(d), "same": bytes.Equal(d, data), "stat": statJSON(st)}, nil
	})
	near := bulk(nearLimitDataBytes)
	step("set near-limit data", set(a, big, near, 0))
	step("get near-limit data", func() (any, error) {
		d, st, err := a.Get(big)
		if err != nil {
			return nil, err
		}
		return obj{"data": digest(d), "same": bytes.Equal(d, near), "stat": statJSON(st)}, nil
	})
}

// A request over jute.maxbuffer: the server drops the connection, the
// session survives and the library resumes it.
func (s *scenario) oversizedRequest() {
	big := mustOpen("Big", s.servers)
	defer big.conn.Close()
	big.takeStates()
	step("set oversized data", set(big.conn, root+"/big", bulk(oversizedDataBytes), -1))
	states, resumed := big.waitResumed()
	record("session resumed after oversized request", obj{"resumed": resumed, "states": states})
	record("session id kept after oversized request", obj{"sessionId": big.conn.SessionID()})
	step("Big sync", syncPath(big.conn, root))
	step("exists large node after oversized request", exists(big.conn, root+"/big"))
}

// The library's lock recipe (protected ephemeral sequential nodes): B
// waits while A holds the lock and gets it when A lets go.
func (s *scenario) lockRecipe() {
	lockDir := root + "/lock"
	la := zk.NewLock(s.a.conn, lockDir, openACL)
	lb := zk.NewLock(s.b.conn, lockDir, openACL)
	step("A lock", func() (any, error) { return done(la.Lock()) })
	step("A lock again", func() (any, error) { return done(la.Lock()) })
	got := make(chan error, 1)
	go func() { got <- lb.Lock() }()
	queued := waitFor(lockWaitMs, func() bool {
		return bounded(func() bool {
			l, _, err := s.a.conn.Children(lockDir)
			return err == nil && len(l) == 2
		})
	})
	record("B queued behind A", queued)
	s.b.recordBarrier("lock")
	select {
	case err := <-got:
		record("B lock while A holds it", obj{"acquired": true, "error": errJSON(err)})
	default:
		record("B lock while A holds it", obj{"acquired": false})
	}
	step("lock children while A holds it", children(s.a.conn, lockDir))
	step("A unlock", func() (any, error) { return done(la.Unlock()) })
	select {
	case err := <-got:
		record("B lock after A unlocked", obj{"acquired": true, "error": errJSON(err)})
	case <-time.After(ms(lockWaitMs)):
		record("B lock after A unlocked", obj{"timeout_ms": lockWaitMs})
	}
	step("B unlock", func() (any, error) { return done(lb.Unlock()) })
	step("A unlock again", func() (any, error) { return done(la.Unlock()) })
	step("A sync after B unlocked", syncPath(s.a.conn, lockDir))
	step("lock children at end", children(s.a.conn, lockDir))
}

// Closing A removes its ephemerals: B, watching, sees them go; A's own
// pending watch is cancelled by the library.
func (s *scenario) ephemeralsOnClose() {
	a, b := s.a.conn, s.b.conn
	step("B sync before A closes", syncPath(b, root))
	step("B exists A's ephemeral", exists(b, root+"/eph"))
	s.b.recordBarrier("before A closes")
	s.b.takeWire()
	ephCh := stepWatch("B existsW A's ephemeral", existsW(b, root+"/eph"))
	rootCh := stepWatch("B childrenW root", childrenW(b, root))
	mCh := stepWatch("B childrenW m", childrenW(b, root+"/m"))
	neverCh := stepWatch("A existsW never", existsW(a, root+"/never"))
	a.Close()
	closed := false
	select {
	case <-s.a.closed:
		closed = true
	case <-time.After(ms(closeWaitMs)):
	}
	record("A shut down after Close", closed)
	record("A session states after Close", s.a.takeStates())
	record("A state after Close", a.State().String())
	record("A pending watch after Close", waitEvent(neverCh))
	step("A get after Close", get(a, root))
	record("B events after A closed", obj{
		"ephemeral": waitEvent(ephCh), "root": waitEvent(rootCh), "m": waitEvent(mCh),
	})
	s.b.recordBarrier("after A closed")
	record("B node events on the wire after A closed", s.b.takeWire())
	step("children of root after A closed", children(b, root))
	step("children of m after A closed", children(b, root+"/m"))
}

func (s *scenario) reaping() {
	b := s.b.conn
	step("create child in container", create(b, root+"/reap/cont/c", nil, zk.FlagPersistent, openACL))
	step("delete child in container", del(b, root+"/reap/cont/c", -1))
	record("emptied container reaped", waitFor(reapWaitMs, func() bool { return gone(b, root+"/reap/cont") }))
	record("short TTL node reaped", waitFor(reapWaitMs, func() bool { return gone(b, root+"/reap/ttl-short") }))
	step("exists long TTL node", exists(b, root+"/ttl"))
	step("children of reap dir", func() (any, error) {
		l, _, err := b.Children(root + "/reap")
		if err != nil {
			return nil, err
		}
		return sorted(l), nil
	})
}

func gone(c *zk.Conn, path string) bool {
	return bounded(func() bool {
		ok, _, err := c.Exists(path)
		return err == nil && !ok
	})
}

// The super user deletes the whole subtree (some nodes are closed to
// everyone else); the list of deleted paths is the final tree.
func (s *scenario) cleanup() {
	su := mustOpen("Cleanup", s.servers)
	defer su.conn.Close()
	defer s.b.conn.Close()
	step("addauth super for cleanup", addAuth(su.conn, "digest", "super:test"))
	step("Cleanup sync", syncPath(su.conn, root))
	step("delete tree", func() (any, error) {
		deleted := []string{}
		err := deleteTree(su.conn, root, &deleted)
		return deleted, err
	})
	step("exists root after cleanup", exists(su.conn, root))
}

func deleteTree(c *zk.Conn, path string, deleted *[]string) error {
	kids, _, err := c.Children(path)
	if err != nil {
		return err
	}
	// By the names as recorded: protected names differ only in their GUID.
	sort.Slice(kids, func(i, j int) bool { return guidless(kids[i]) < guidless(kids[j]) })
	for _, k := range kids {
		if err := deleteTree(c, path+"/"+k, deleted); err != nil {
			return err
		}
	}
	if err := c.Delete(path, -1); err != nil {
		return err
	}
	*deleted = append(*deleted, guidless(path))
	return nil
}
