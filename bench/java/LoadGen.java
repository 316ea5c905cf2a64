import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;

import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

/**
 * Closed-loop load generator on Apache ZooKeeper's own Java client: the
 * same workloads, tree and op sequence as `keel bench` (crates/bench), so a
 * result can be checked with a second client library.
 *
 * <p>Each session is one {@link ZooKeeper} handle connected to one server
 * (session i on servers[i % n]) with exactly one request in flight: the
 * asynchronous API's callback (on the handle's event thread) records the
 * reply and issues the next request. A run: connect the admin session (first
 * server) and the sessions; build the tree under a fresh root; sync every
 * session on it; warm-up (ops not recorded, errors counted); timed phase
 * (progress line on stderr once a second, in keel bench's format); wait for
 * the replies still due; close the sessions; delete the tree (unless
 * --keep); print the summary on stdout, one "key value" per line.
 *
 * <pre>
 * root/data/n000..n099     DATA_NODES nodes of VALUE bytes     (mix: get, set)
 * root/list/c000..c099     LIST_CHILDREN of LIST_CHILD_BYTES   (mix: getChildren)
 * root/writes/c&lt;i&gt;/l0-b&lt;k&gt;/n&lt;index&gt;  creates (and mix deletes), BUCKET_NODES per bucket
 * </pre>
 *
 * Exit status: 0 after a run (errors are in the summary), 1 when the run
 * could not be made (connect, setup), 2 on bad arguments.
 */
public final class LoadGen {
    // The constants of crates/bench (lib.rs, workload.rs); keep them equal.
    static final long DEFAULT_SEED = 0x4B45454C42454E43L;
    static final int DATA_NODES = 100;
    static final int LIST_CHILDREN = 100;
    static final int LIST_CHILD_BYTES = 50;
    static final long BUCKET_NODES = 10_000;
    static final long DELETE_POOL_PER_LANE = 8;
    static final long DELETE_POOL_TOTAL = 20_000;
    static final int SESSION_TIMEOUT_MS = 30_000;
    static final int DEFAULT_VALUE_SIZE = 100;
    static final int MAX_VALUE_SIZE = 1 << 20;
    static final int MAX_SESSIONS = 10_000;
    static final long MAX_DURATION_S = 24 * 60 * 60;
    /** Requests in flight on the admin session while building or deleting the tree. */
    static final int SETUP_CONCURRENCY = 256;
    /** Time allowed for every session to connect, all opened at once. */
    static final long CONNECT_TIMEOUT_MS = 20_000;
    /** Time allowed for the syncs and for each level of the tree setup. */
    static final long SETUP_TIMEOUT_MS = 120_000;
    /** Time allowed after the deadline for the replies still due. */
    static final long DRAIN_TIMEOUT_MS = 60_000;
    /** Sessions closed at once at the end. */
    static final int CLOSE_THREADS = 32;

    static final int CREATE = 0, SET = 1, GET = 2, LIST = 3, DELETE = 4;
    static final String[] KIND_NAMES = {"create", "set", "get", "list", "delete"};
    /** keel bench's MIX_BASIS_POINTS (RaftKeeper's mix), in the same order. */
    static final int[][] MIX_BASIS_POINTS = {
        {CREATE, 100}, {SET, 800}, {GET, 4_500}, {LIST, 4_500}, {DELETE, 100},
    };

    static final String USAGE =
        "usage: java LoadGen --servers HOST:PORT[,HOST:PORT...] --workload create|mix\n"
        + "                    --sessions N --duration S [--warmup S] [--value-size BYTES] [--keep]\n"
        + "  --sessions   ZooKeeper handles, session i on server i mod n, one request in flight each (1.."
        + MAX_SESSIONS + ")\n"
        + "  --duration   timed seconds (1.." + MAX_DURATION_S + ")\n"
        + "  --warmup     seconds of load before the timed phase, not recorded (default 0)\n"
        + "  --value-size data bytes of created, set and data nodes (0.." + MAX_VALUE_SIZE
        + ", default " + DEFAULT_VALUE_SIZE + ")\n"
        + "  --keep       leave the tree on the server (default: delete it at the end)\n";

    // ---- arguments ------------------------------------------------------

    static final class Config {
        List<String> servers = new ArrayList<>();
        String workload;
        int sessions = -1;
        long durationS = -1;
        long warmupS = 0;
        int valueSize = DEFAULT_VALUE_SIZE;
        boolean keep;
    }

    static final class BadArgs extends Exception {
        private static final long serialVersionUID = 1L;

        BadArgs(String m) {
            super(m);
        }
    }

    static long number(String flag, String v, long min, long max) throws BadArgs {
        long n;
        try {
            n = Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            throw new BadArgs(flag + " wants a whole number, got \"" + v + "\"");
        }
        if (n < min || n > max) {
            throw new BadArgs(flag + " must be " + min + ".." + max + ", got " + n);
        }
        return n;
    }

    static Config parse(String[] args) throws BadArgs {
        Config c = new Config();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--keep")) {
                c.keep = true;
                continue;
            }
            if (a.equals("-h") || a.equals("--help")) {
                throw new BadArgs("");
            }
            if (!a.startsWith("--")) {
                throw new BadArgs("unexpected argument \"" + a + "\"");
            }
            if (i + 1 >= args.length) {
                throw new BadArgs(a + " needs a value");
            }
            String v = args[++i];
            switch (a) {
                case "--servers":
                    for (String s : v.split(",")) {
                        s = s.trim();
                        if (s.isEmpty()) {
                            continue;
                        }
                        int colon = s.lastIndexOf(':');
                        if (colon <= 0 || s.contains("/")) {
                            throw new BadArgs("bad server address \"" + s + "\": expected HOST:PORT");
                        }
                        number("port of " + s, s.substring(colon + 1), 1, 65535);
                        c.servers.add(s);
                    }
                    break;
                case "--workload":
                    if (!v.equals("create") && !v.equals("mix")) {
                        throw new BadArgs("unknown workload \"" + v + "\"; expected create or mix");
                    }
                    c.workload = v;
                    break;
                case "--sessions":
                    c.sessions = (int) number(a, v, 1, MAX_SESSIONS);
                    break;
                case "--duration":
                    c.durationS = number(a, v, 1, MAX_DURATION_S);
                    break;
                case "--warmup":
                    c.warmupS = number(a, v, 0, MAX_DURATION_S);
                    break;
                case "--value-size":
                    c.valueSize = (int) number(a, v, 0, MAX_VALUE_SIZE);
                    break;
                default:
                    throw new BadArgs("unknown option " + a);
            }
        }
        if (c.servers.isEmpty()) {
            throw new BadArgs("no server given (--servers HOST:PORT[,HOST:PORT...])");
        }
        if (c.workload == null) {
            throw new BadArgs("--workload is required (create or mix)");
        }
        if (c.sessions < 0) {
            throw new BadArgs("--sessions is required");
        }
        if (c.durationS < 0) {
            throw new BadArgs("--duration is required");
        }
        return c;
    }

    // ---- keel bench's generator ----------------------------------------

    /** SplitMix64, exactly as crates/bench/src/workload.rs (same seeds, same streams). */
    static final class SplitMix64 {
        long state;

        SplitMix64(long seed) {
            state = seed;
        }

        static SplitMix64 forLane(long seed, long lane) {
            SplitMix64 mixer = new SplitMix64(seed ^ (lane * 0xD1B54A32D192ED03L));
            return new SplitMix64(mixer.next());
        }

        long next() {
            state += 0x9E3779B97F4A7C15L;
            long z = state;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            return z ^ (z >>> 31);
        }

        /** (next() * n) >> 64 over unsigned 128 bits, n > 0: Lemire's multiply-shift. */
        long below(long n) {
            long x = next();
            return Math.multiplyHigh(x, n) + (x < 0 ? n : 0);
        }
    }

    // ---- latency histogram ------------------------------------------------

    /**
     * Microsecond latencies, exact below 2048 µs, then 1024 buckets per power
     * of two (0.1 % resolution, like a 3-significant-digit HDR histogram).
     * Shared by every lane; quantiles give the bucket's highest value.
     */
    static final class Histogram {
        static final int SUB_BITS = 10;
        static final int SUB = 1 << SUB_BITS;
        static final int MAX_SHIFT = 40;
        final AtomicLongArray counts = new AtomicLongArray(2 * SUB + MAX_SHIFT * SUB);

        static int index(long us) {
            if (us < 2 * SUB) {
                return (int) Math.max(us, 0);
            }
            int shift = 63 - Long.numberOfLeadingZeros(us) - SUB_BITS;
            if (shift > MAX_SHIFT) {
                shift = MAX_SHIFT;
                us = (2L * SUB << shift) - 1;
            }
            return 2 * SUB + (shift - 1) * SUB + (int) ((us >>> shift) - SUB);
        }

        static long highest(int index) {
            if (index < 2 * SUB) {
                return index;
            }
            int shift = (index - 2 * SUB) / SUB + 1;
            long sub = (index - 2 * SUB) % SUB + SUB;
            return ((sub + 1) << shift) - 1;
        }

        void record(long us) {
            counts.incrementAndGet(index(us));
        }

        long quantile(double q) {
            long total = 0;
            int n = counts.length();
            long[] snap = new long[n];
            for (int i = 0; i < n; i++) {
                snap[i] = counts.get(i);
                total += snap[i];
            }
            if (total == 0) {
                return 0;
            }
            long want = Math.max(1, (long) (q * total + 0.5));
            long seen = 0;
            for (int i = 0; i < n; i++) {
                seen += snap[i];
                if (seen >= want) {
                    return highest(i);
                }
            }
            return highest(n - 1);
        }
    }

    // ---- shared state -----------------------------------------------------

    static final AtomicLongArray OK_BY_KIND = new AtomicLongArray(KIND_NAMES.length);
    static final LongAdder OK = new LongAdder();
    static final LongAdder TIMED_ERRORS = new LongAdder();
    static final LongAdder WARMUP_ERRORS = new LongAdder();
    static final Map<String, LongAdder> ERROR_KINDS = new ConcurrentHashMap<>();
    static final Histogram HIST = new Histogram();
    /** Every node the lanes made or removed (warm-up and timed, buckets too). */
    static final LongAdder CREATED_NODES = new LongAdder();
    static final LongAdder DELETED_NODES = new LongAdder();
    /** Of CREATED_NODES, the new buckets (untimed, like the setup). */
    static final LongAdder NEW_BUCKETS = new LongAdder();
    static final LongAdder DISCONNECTS = new LongAdder();
    static final LongAdder EXPIRIES = new LongAdder();
    static final AtomicLong LAST_REPLY_NS = new AtomicLong();

    static volatile boolean running;

    static void log(String m) {
        System.err.println(m);
        System.err.flush();
    }

    static String codeName(int rc) {
        KeeperException.Code c = KeeperException.Code.get(rc);
        return c == null ? "code" + rc : c.name();
    }

    static void countError(int rc, boolean timed) {
        (timed ? TIMED_ERRORS : WARMUP_ERRORS).increment();
        ERROR_KINDS.computeIfAbsent(codeName(rc) + (timed ? "" : "_warmup"), k -> new LongAdder()).increment();
    }

    /** A result after which keel bench's lane stops: the session is not connected. */
    static boolean sessionLost(int rc) {
        return rc == KeeperException.Code.CONNECTIONLOSS.intValue()
            || rc == KeeperException.Code.SESSIONEXPIRED.intValue()
            || rc == KeeperException.Code.SESSIONMOVED.intValue();
    }

    // ---- sessions -----------------------------------------------------------

    static final class Session implements Watcher {
        final String server;
        final CountDownLatch connected = new CountDownLatch(1);
        ZooKeeper zk;

        Session(String server) {
            this.server = server;
        }

        void open() throws java.io.IOException {
            zk = new ZooKeeper(server, SESSION_TIMEOUT_MS, this);
        }

        @Override
        public void process(WatchedEvent e) {
            switch (e.getState()) {
                case SyncConnected:
                    connected.countDown();
                    break;
                case Disconnected:
                    if (running) {
                        DISCONNECTS.increment();
                    }
                    break;
                case Expired:
                    if (running) {
                        EXPIRIES.increment();
                    }
                    break;
                default:
                    break;
            }
        }
    }

    static List<Session> connectAll(List<String> servers, int n) throws Exception {
        List<Session> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Session s = new Session(servers.get(i % servers.size()));
            s.open();
            out.add(s);
        }
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(CONNECT_TIMEOUT_MS);
        for (Session s : out) {
            long left = until - System.nanoTime();
            if (!s.connected.await(Math.max(left, 0), TimeUnit.NANOSECONDS)) {
                throw new IllegalStateException("cannot connect to " + s.server + ": no session within "
                    + CONNECT_TIMEOUT_MS / 1000 + " s");
            }
        }
        return out;
    }

    static void closeAll(List<Session> sessions) throws InterruptedException {
        ExecutorService pool = Executors.newFixedThreadPool(CLOSE_THREADS);
        for (Session s : sessions) {
            pool.execute(() -> {
                try {
                    s.zk.close();
                } catch (InterruptedException ignored) {
                    Thread.currentThread().interrupt();
                }
            });
        }
        pool.shutdown();
        pool.awaitTermination(SETUP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
    }

    // ---- the tree -----------------------------------------------------------

    static String dataNode(String root, int i) {
        return String.format("%s/data/n%03d", root, i);
    }

    static String listNode(String root) {
        return root + "/list";
    }

    static String bucket(String root, int client, long b) {
        return root + "/writes/c" + client + "/l0-b" + b;
    }

    static String node(String root, int client, long index) {
        return bucket(root, client, index / BUCKET_NODES) + "/n" + index;
    }

    static byte[] valueBytes(int n) {
        byte[] v = new byte[n];
        for (int i = 0; i < n; i++) {
            v[i] = (byte) ('a' + i % 26);
        }
        return v;
    }

    static final class Spec {
        final String path;
        final byte[] data;

        Spec(String path, byte[] data) {
            this.path = path;
            this.data = data;
        }
    }

    /** keel bench's prepare_levels for one lane per session: parents before children. */
    static List<List<Spec>> levels(String root, boolean mix, int sessions, byte[] value, long pool) {
        byte[] empty = new byte[0];
        List<List<Spec>> levels = new ArrayList<>();
        levels.add(List.of(new Spec(root, empty)));
        List<Spec> dirs = new ArrayList<>(), leaves = new ArrayList<>(), buckets = new ArrayList<>(),
            pooled = new ArrayList<>();
        if (mix) {
            dirs.add(new Spec(root + "/data", empty));
            for (int i = 0; i < DATA_NODES; i++) {
                leaves.add(new Spec(dataNode(root, i), value));
            }
            byte[] child = new byte[LIST_CHILD_BYTES];
            java.util.Arrays.fill(child, (byte) 'c');
            dirs.add(new Spec(listNode(root), empty));
            for (int i = 0; i < LIST_CHILDREN; i++) {
                leaves.add(new Spec(String.format("%s/c%03d", listNode(root), i), child));
            }
        }
        dirs.add(new Spec(root + "/writes", empty));
        for (int c = 0; c < sessions; c++) {
            leaves.add(new Spec(root + "/writes/c" + c, empty));
            buckets.add(new Spec(bucket(root, c, 0), empty));
            for (long i = 0; i < pool; i++) {
                pooled.add(new Spec(node(root, c, i), value));
            }
        }
        for (List<Spec> l : List.of(dirs, leaves, buckets, pooled)) {
            if (!l.isEmpty()) {
                levels.add(l);
            }
        }
        return levels;
    }

    /** Runs `issue` per item with at most SETUP_CONCURRENCY under way; the first error, if any. */
    interface Issue<T> {
        void issue(T item, AsyncCallback.VoidCallback done);
    }

    static <T> String pipelined(List<T> items, Issue<T> issue, int... acceptable) throws InterruptedException {
        Semaphore slots = new Semaphore(SETUP_CONCURRENCY);
        AtomicReference<String> failure = new AtomicReference<>();
        for (T item : items) {
            if (failure.get() != null) {
                break;
            }
            if (!slots.tryAcquire(SETUP_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                return "no reply within " + SETUP_TIMEOUT_MS / 1000 + " s";
            }
            issue.issue(item, (rc, path, ctx) -> {
                boolean ok = rc == 0;
                for (int a : acceptable) {
                    ok |= rc == a;
                }
                if (!ok) {
                    failure.compareAndSet(null, path + ": " + codeName(rc));
                }
                slots.release();
            });
        }
        if (!slots.tryAcquire(SETUP_CONCURRENCY, SETUP_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
            return "no reply within " + SETUP_TIMEOUT_MS / 1000 + " s";
        }
        return failure.get();
    }

    static long createLevels(ZooKeeper zk, List<List<Spec>> levels) throws InterruptedException {
        long made = 0;
        for (List<Spec> level : levels) {
            String err = pipelined(level, (s, done) -> zk.create(s.path, s.data, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.PERSISTENT, (rc, path, ctx, name) -> done.processResult(rc, path, ctx), null));
            if (err != null) {
                throw new IllegalStateException("preparing the tree failed at " + err);
            }
            made += level.size();
        }
        return made;
    }

    /** Lists the tree top-down, then deletes it bottom-up; nodes already gone are fine. */
    static long deleteTree(ZooKeeper zk, String root) throws InterruptedException {
        List<List<String>> levels = new ArrayList<>();
        List<String> level = List.of(root);
        while (!level.isEmpty()) {
            levels.add(level);
            List<String> next = java.util.Collections.synchronizedList(new ArrayList<>());
            String err = pipelined(level, (p, done) -> zk.getChildren(p, false, (rc, path, ctx, children) -> {
                if (rc == 0) {
                    for (String c : children) {
                        next.add(path + "/" + c);
                    }
                }
                done.processResult(rc, path, ctx);
            }, null), KeeperException.Code.NONODE.intValue());
            if (err != null) {
                throw new IllegalStateException("listing the tree failed at " + err);
            }
            level = new ArrayList<>(next);
        }
        LongAdder deleted = new LongAdder();
        for (int d = levels.size() - 1; d >= 0; d--) {
            String err = pipelined(levels.get(d), (p, done) -> zk.delete(p, -1, (rc, path, ctx) -> {
                if (rc == 0) {
                    deleted.increment();
                }
                done.processResult(rc, path, ctx);
            }, null), KeeperException.Code.NONODE.intValue());
            if (err != null) {
                throw new IllegalStateException("deleting the tree failed at " + err);
            }
        }
        return deleted.sum();
    }

    // ---- the closed loop ----------------------------------------------------

    static final class Plan {
        final boolean mix;
        final String root;
        final byte[] value;
        final String[] dataPaths = new String[DATA_NODES];
        final String listPath;
        volatile long timedStartNs;
        volatile long deadlineNs;
        final CountDownLatch lanesDone;

        Plan(boolean mix, String root, byte[] value, int lanes) {
            this.mix = mix;
            this.root = root;
            this.value = value;
            for (int i = 0; i < DATA_NODES; i++) {
                dataPaths[i] = dataNode(root, i);
            }
            listPath = listNode(root);
            lanesDone = new CountDownLatch(lanes);
        }
    }

    /**
     * One session's closed loop, as keel bench's run_lane: draw an op, issue
     * it, and on its reply record it and issue the next; until the deadline or
     * until the session is lost. Only the handle's event thread touches a lane
     * once it runs.
     */
    static final class Lane implements AsyncCallback.StringCallback, AsyncCallback.StatCallback,
        AsyncCallback.DataCallback, AsyncCallback.ChildrenCallback, AsyncCallback.VoidCallback {
        final Plan plan;
        final ZooKeeper zk;
        final int client;
        final SplitMix64 rng;
        long nextNode;
        final ArrayDeque<Long> live = new ArrayDeque<>();
        // The request in flight.
        int kind;
        long index;
        long startedNs;
        boolean bucketCreate;

        Lane(Plan plan, ZooKeeper zk, int client, long pool) {
            this.plan = plan;
            this.zk = zk;
            this.client = client;
            this.rng = SplitMix64.forLane(DEFAULT_SEED, client);
            this.nextNode = pool;
            for (long i = 0; i < pool; i++) {
                live.add(i);
            }
        }

        int draw() {
            if (!plan.mix) {
                return CREATE;
            }
            long point = rng.below(10_000);
            for (int[] share : MIX_BASIS_POINTS) {
                if (point < share[1]) {
                    return share[0];
                }
                point -= share[1];
            }
            throw new AssertionError("MIX_BASIS_POINTS sums to 10 000");
        }

        void next() {
            if (System.nanoTime() - plan.deadlineNs >= 0) {
                plan.lanesDone.countDown();
                return;
            }
            kind = draw();
            if (kind == DELETE && live.isEmpty()) {
                kind = CREATE; // the delete pool is used up: create instead, as keel bench does
            }
            startedNs = System.nanoTime();
            switch (kind) {
                case CREATE:
                    index = nextNode++;
                    if (index > 0 && index % BUCKET_NODES == 0) {
                        // A new bucket first: untimed, like the tree setup.
                        bucketCreate = true;
                        zk.create(bucket(plan.root, client, index / BUCKET_NODES), new byte[0],
                            ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT, this, null);
                        return;
                    }
                    issueCreate();
                    return;
                case DELETE:
                    index = live.pollFirst();
                    zk.delete(node(plan.root, client, index), -1, this, null);
                    return;
                case SET:
                    zk.setData(plan.dataPaths[(int) rng.below(DATA_NODES)], plan.value, -1, this, null);
                    return;
                case GET:
                    zk.getData(plan.dataPaths[(int) rng.below(DATA_NODES)], false, this, null);
                    return;
                case LIST:
                    zk.getChildren(plan.listPath, false, (AsyncCallback.ChildrenCallback) this, null);
                    return;
                default:
                    throw new AssertionError(kind);
            }
        }

        void issueCreate() {
            startedNs = System.nanoTime();
            zk.create(node(plan.root, client, index), plan.value, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.PERSISTENT, this, null);
        }

        void done(int rc) {
            long now = System.nanoTime();
            LAST_REPLY_NS.accumulateAndGet(now, Math::max);
            boolean timed = startedNs - plan.timedStartNs >= 0;
            if (bucketCreate) {
                bucketCreate = false;
                if (rc == 0 || rc == KeeperException.Code.NODEEXISTS.intValue()) {
                    if (rc == 0) {
                        CREATED_NODES.increment();
                        NEW_BUCKETS.increment();
                    }
                    issueCreate();
                    return;
                }
            } else if (rc == 0) {
                if (timed) {
                    OK.increment();
                    OK_BY_KIND.incrementAndGet(kind);
                    HIST.record((now - startedNs) / 1_000);
                }
                if (kind == CREATE) {
                    CREATED_NODES.increment();
                    if (plan.mix) {
                        live.addLast(index);
                    }
                } else if (kind == DELETE) {
                    DELETED_NODES.increment();
                }
                next();
                return;
            }
            countError(rc, timed);
            if (sessionLost(rc)) {
                plan.lanesDone.countDown();
                return;
            }
            next();
        }

        @Override
        public void processResult(int rc, String path, Object ctx, String name) {
            done(rc);
        }

        @Override
        public void processResult(int rc, String path, Object ctx, org.apache.zookeeper.data.Stat stat) {
            done(rc);
        }

        @Override
        public void processResult(int rc, String path, Object ctx, byte[] data, org.apache.zookeeper.data.Stat stat) {
            done(rc);
        }

        @Override
        public void processResult(int rc, String path, Object ctx, List<String> children) {
            done(rc);
        }

        @Override
        public void processResult(int rc, String path, Object ctx) {
            done(rc);
        }
    }

    static long timedOps() {
        return OK.sum() + TIMED_ERRORS.sum();
    }

    static String runLine(double elapsedS, long opsPerSec) {
        return String.format("[%5.1f s] %8d ops/s   p99 %7d µs   ops %10d   errors %d", elapsedS, opsPerSec,
            HIST.quantile(0.99), timedOps(), TIMED_ERRORS.sum());
    }

    // ---- main ---------------------------------------------------------------

    public static void main(String[] args) throws Exception {
        Config cfg;
        try {
            cfg = parse(args);
        } catch (BadArgs e) {
            if (!e.getMessage().isEmpty()) {
                System.err.println("LoadGen: " + e.getMessage());
            }
            System.err.print(USAGE);
            System.exit(e.getMessage().isEmpty() ? 0 : 2);
            return;
        }
        try {
            System.exit(run(cfg));
        } catch (IllegalStateException | IllegalArgumentException | java.io.IOException e) {
            System.err.println("LoadGen: " + e.getMessage());
            System.exit(1);
        }
    }

    static int run(Config cfg) throws Exception {
        boolean mix = cfg.workload.equals("mix");
        String root = String.format("/keel-loadgen-%x-%d", System.currentTimeMillis(), ProcessHandle.current().pid());
        long pool = mix ? Math.max(1, Math.min(DELETE_POOL_PER_LANE, DELETE_POOL_TOTAL / cfg.sessions)) : 0;
        byte[] value = valueBytes(cfg.valueSize);

        // 1. Sessions: the admin session on the first server, session i on servers[i % n].
        Session admin = new Session(cfg.servers.get(0));
        admin.open();
        List<Session> sessions;
        try {
            if (!admin.connected.await(CONNECT_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                throw new IllegalStateException("cannot connect to " + admin.server + ": no session within "
                    + CONNECT_TIMEOUT_MS / 1000 + " s");
            }
            sessions = connectAll(cfg.servers, cfg.sessions);
        } catch (IllegalStateException e) {
            admin.zk.close();
            throw e;
        }
        log(String.format("setup: %d sessions on %s, root %s", cfg.sessions, String.join(",", cfg.servers), root));

        // 2. The tree, then a sync on every session so each one's server has
        //    the admin session's writes.
        long setupNodes = createLevels(admin.zk, levels(root, mix, cfg.sessions, value, pool));
        String err = pipelined(sessions, (s, done) -> s.zk.sync(root, done, null));
        if (err != null) {
            throw new IllegalStateException("sync failed: " + err);
        }
        log(String.format("setup: %d nodes created", setupNodes));

        // 3. Warm-up and timed phase: one lane per session.
        Plan plan = new Plan(mix, root, value, cfg.sessions);
        long start = System.nanoTime();
        plan.timedStartNs = start + TimeUnit.SECONDS.toNanos(cfg.warmupS);
        plan.deadlineNs = plan.timedStartNs + TimeUnit.SECONDS.toNanos(cfg.durationS);
        running = true;
        if (cfg.warmupS > 0) {
            log(String.format("warm-up: %d s, not recorded", cfg.warmupS));
        }
        List<Lane> lanes = new ArrayList<>();
        for (int i = 0; i < cfg.sessions; i++) {
            lanes.add(new Lane(plan, sessions.get(i).zk, i, pool));
        }
        for (Lane lane : lanes) {
            lane.next();
        }
        // Progress once a second of the timed phase, in keel bench's format
        // (bench/compare.py's RUN_LINE reads it to sample the servers' CPU).
        long lastOk = 0;
        long lastTick = plan.timedStartNs;
        for (long tick = 1; ; tick++) {
            long at = plan.timedStartNs + TimeUnit.SECONDS.toNanos(tick);
            if (at - plan.deadlineNs > 0) {
                break; // past the deadline: only replies still due
            }
            if (plan.lanesDone.await(Math.max(at - System.nanoTime(), 0), TimeUnit.NANOSECONDS)) {
                break;
            }
            long ok = OK.sum();
            double secs = Math.max((System.nanoTime() - lastTick) / 1e9, 1e-3);
            lastTick = System.nanoTime();
            log(runLine(tick, Math.round((ok - lastOk) / secs)));
            lastOk = ok;
        }
        boolean drained = plan.lanesDone.await(DRAIN_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        long end = System.nanoTime();
        running = false;
        long stuck = plan.lanesDone.getCount();
        if (!drained) {
            // Requests still without a reply: errors, never left out.
            TIMED_ERRORS.add(stuck);
            ERROR_KINDS.computeIfAbsent("NO_REPLY", k -> new LongAdder()).add(stuck);
        }
        double elapsedS = Math.max(end - plan.timedStartNs, 1) / 1e9;
        long ok = OK.sum();
        log(runLine(elapsedS, Math.round((ok - lastOk) / Math.max((end - lastTick) / 1e9, 1e-3))));

        // 4. Close the sessions, delete the tree.
        closeAll(sessions);
        long cleaned = 0;
        String cleanupError = "";
        if (!cfg.keep) {
            try {
                cleaned = deleteTree(admin.zk, root);
            } catch (IllegalStateException e) {
                cleanupError = e.getMessage();
                log("LoadGen: " + cleanupError);
            }
        }
        admin.zk.close();

        long errors = TIMED_ERRORS.sum() + WARMUP_ERRORS.sum();
        StringBuilder out = new StringBuilder();
        out.append(String.format("workload %s%n", cfg.workload));
        out.append(String.format("sessions %d%n", cfg.sessions));
        out.append(String.format("servers %s%n", String.join(",", cfg.servers)));
        out.append(String.format("root %s%n", root));
        out.append(String.format("elapsed_s %.3f%n", elapsedS));
        out.append(String.format("TPS %.1f%n", ok / elapsedS));
        out.append(String.format("p50_us %d%n", HIST.quantile(0.50)));
        out.append(String.format("p90_us %d%n", HIST.quantile(0.90)));
        out.append(String.format("p99_us %d%n", HIST.quantile(0.99)));
        out.append(String.format("p999_us %d%n", HIST.quantile(0.999)));
        out.append(String.format("max_us %d%n", HIST.quantile(1.0)));
        out.append(String.format("ops %d%n", timedOps()));
        out.append(String.format("successes %d%n", ok));
        for (int k = 0; k < KIND_NAMES.length; k++) {
            out.append(String.format("ok_%s %d%n", KIND_NAMES[k], OK_BY_KIND.get(k)));
        }
        out.append(String.format("errors %d%n", errors));
        out.append(String.format("warmup_errors %d%n", WARMUP_ERRORS.sum()));
        Map<String, LongAdder> kinds = new TreeMap<>(ERROR_KINDS);
        for (Map.Entry<String, LongAdder> e : kinds.entrySet()) {
            out.append(String.format("error_%s %d%n", e.getKey(), e.getValue().sum()));
        }
        out.append(String.format("disconnects %d%n", DISCONNECTS.sum()));
        out.append(String.format("expiries %d%n", EXPIRIES.sum()));
        out.append(String.format("setup_nodes %d%n", setupNodes));
        out.append(String.format("created_nodes %d%n", CREATED_NODES.sum()));
        out.append(String.format("bucket_nodes %d%n", NEW_BUCKETS.sum()));
        out.append(String.format("deleted_nodes %d%n", DELETED_NODES.sum()));
        out.append(String.format("kept %s%n", cfg.keep));
        out.append(String.format("cleaned_nodes %d%n", cleaned));
        if (!cleanupError.isEmpty()) {
            out.append(String.format("cleanup_error %s%n", cleanupError.replace('\n', ' ')));
        }
        System.out.print(out);
        System.out.flush();
        return 0;
    }
}
