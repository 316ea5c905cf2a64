// Differential scenario driven by Apache Curator 5.5 (the framework and its
// recipes) over the official Java client (ZooKeeper 3.8).
// Usage: java -cp zookeeper.jar:...:curator-*.jar:guava.jar:. CuratorScenario HOST:PORT[,HOST:PORT...]
// Compiled with CompatScenario.java, whose step()/record() print one JSON
// object per line: {"step": "...", "result": ...}. What a recipe prints is
// what its users see (who holds a lock, who leads, a counter's value, the
// events a cache delivered), never a session id, a zxid or a time; the
// names Curator makes up (protected nodes' GUIDs, lock nodes) are printed
// as their shape and sequence number. Every session here reads what it
// wrote itself, or learns of another's writes through a recipe's watches,
// so it holds against a cluster whose members a client picks at random.
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.regex.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.CuratorWatcher;
import org.apache.curator.framework.api.transaction.CuratorTransactionResult;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.nodes.PersistentNode;
import org.apache.curator.framework.recipes.queue.SimpleDistributedQueue;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.data.Stat;

public class CuratorScenario {
    // Every recipe's nodes live under this namespace (Curator prefixes it).
    static final String NS = "curator-compat";
    // How long a step waits for what another session or a watch must bring.
    static final long WAIT_S = 20;
    // How long a step waits for what must NOT happen (a lock held elsewhere).
    static final long REFUSED_MS = 300;
    static final long TTL_MS = 60_000;
    // Curator's protected names: _c_<GUID>-<name><10-digit sequence>.
    static final Pattern PROTECTED = Pattern.compile(
        "_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-(.*?)(\\d{10})?");

    static CuratorFramework open(String connect) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
            .connectString(connect)
            .sessionTimeoutMs(15_000)
            .connectionTimeoutMs(20_000)
            .retryPolicy(new ExponentialBackoffRetry(100, 6))
            .namespace(NS)
            .build();
        c.start();
        if (!c.blockUntilConnected((int) WAIT_S, TimeUnit.SECONDS)) throw new RuntimeException("connect timeout");
        return c;
    }

    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static String s(byte[] d) { return d == null ? null : new String(d, StandardCharsets.UTF_8); }

    /** What a Stat shows a recipe's user, without zxids and times. */
    static Map<String, Object> stat(Stat st) {
        if (st == null) return null;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("version", st.getVersion());
        m.put("cversion", st.getCversion());
        m.put("dataLength", st.getDataLength());
        m.put("numChildren", st.getNumChildren());
        m.put("ephemeral", st.getEphemeralOwner() != 0);
        return m;
    }

    /** A name Curator made up, as its shape: protected or not, base name, sequence. */
    static String shape(String name) {
        Matcher m = PROTECTED.matcher(name);
        if (m.matches()) return "protected:" + m.group(1) + ":" + (m.group(2) == null ? "-" : m.group(2));
        return "plain:" + name;
    }

    static List<String> shapes(Collection<String> names) {
        List<String> out = new ArrayList<>();
        for (String n : names) out.add(shape(n.substring(n.lastIndexOf('/') + 1)));
        Collections.sort(out);
        return out;
    }

    /** ZooKeeper's sync through `c`: its server has applied what the
     *  leader committed (before `c` reads what another session changed). */
    static void sync(CuratorFramework c, String path) throws Exception {
        CountDownLatch synced = new CountDownLatch(1);
        c.sync().inBackground((client, event) -> synced.countDown()).forPath(path);
        if (!synced.await(WAIT_S, TimeUnit.SECONDS)) throw new RuntimeException("sync timeout");
    }

    static List<String> sorted(Collection<String> l) { List<String> c = new ArrayList<>(l); Collections.sort(c); return c; }

    static void step(String label, CompatScenario.Op0 op) { CompatScenario.step(label, op); }

    static String connect;

    public static void main(String[] args) throws Exception {
        connect = args[0];
        CuratorFramework a = open(connect);
        CuratorFramework bc = open(connect);

        framework(a);
        transactions(a);
        locks(a, bc);
        leaders(a, bc);
        counters(a, bc);
        caches(a);
        queues(a, bc);
        nodes(a, bc);

        step("cleanup", () -> { a.delete().deletingChildrenIfNeeded().forPath("/"); return a.checkExists().forPath("/") == null; });
        bc.close();
        a.close();
        System.out.println("{\"step\":\"done\",\"result\":true}");
    }

    // ------------------------------------------------------------ the framework's builders
    static void framework(CuratorFramework a) {
        step("create with parent containers", () -> a.create().creatingParentContainersIfNeeded().forPath("/f/a/b", b("v1")));
        step("parent is a container", () -> {
            Stat st = a.checkExists().forPath("/f/a");
            return Arrays.asList(stat(st), a.getChildren().forPath("/f"));
        });
        step("create existing", () -> a.create().forPath("/f/a/b", b("again")));
        step("create orSetData existing", () -> a.create().orSetData().forPath("/f/a/b", b("v2")));
        step("getData storingStatIn", () -> { Stat st = new Stat(); byte[] d = a.getData().storingStatIn(st).forPath("/f/a/b"); return Arrays.asList(s(d), stat(st)); });
        step("setData withVersion", () -> stat(a.setData().withVersion(1).forPath("/f/a/b", b("v3"))));
        step("setData stale version", () -> stat(a.setData().withVersion(1).forPath("/f/a/b", b("v4"))));
        step("create protected ephemeral sequential", () -> {
            String p = a.create().creatingParentsIfNeeded().withProtection().withMode(CreateMode.EPHEMERAL_SEQUENTIAL).forPath("/f/p/job-", b("x"));
            return Arrays.asList(p.substring(0, p.lastIndexOf('/')), shape(p.substring(p.lastIndexOf('/') + 1)));
        });
        step("create protected persistent", () -> shape(last(a.create().creatingParentsIfNeeded().withProtection().forPath("/f/p/plain", b("y")))));
        step("children shapes", () -> shapes(a.getChildren().forPath("/f/p")));
        step("create TTL node", () -> a.create().withTtl(TTL_MS).withMode(CreateMode.PERSISTENT_WITH_TTL).forPath("/f/ttl", b("t")));
        step("create TTL without TTL", () -> a.create().withMode(CreateMode.PERSISTENT_WITH_TTL).forPath("/f/ttl2", b("t")));
        step("createContainers", () -> { a.createContainers("/f/c1/c2"); return stat(a.checkExists().forPath("/f/c1/c2")); });
        step("sequential names", () -> {
            List<String> out = new ArrayList<>();
            for (int i = 0; i < 3; i++) out.add(last(a.create().creatingParentsIfNeeded().withMode(CreateMode.PERSISTENT_SEQUENTIAL).forPath("/f/seq/n-")));
            return out;
        });
        step("data watcher fires once", () -> {
            BlockingQueue<String> events = new LinkedBlockingQueue<>();
            CuratorWatcher w = e -> events.add(e.getType() + " " + e.getPath());
            a.getData().usingWatcher(w).forPath("/f/a/b");
            a.setData().forPath("/f/a/b", b("w1"));
            String first = events.poll(WAIT_S, TimeUnit.SECONDS);
            a.setData().forPath("/f/a/b", b("w2"));
            String second = events.poll(REFUSED_MS, TimeUnit.MILLISECONDS);
            return Arrays.asList(first, second);
        });
        BlockingQueue<String> recursive = new LinkedBlockingQueue<>();
        CuratorWatcher w = e -> recursive.add(e.getType() + " " + e.getPath());
        step("persistent recursive watch", () -> {
            BlockingQueue<String> events = recursive;
            a.watchers().add().withMode(AddWatchMode.PERSISTENT_RECURSIVE).usingWatcher(w).forPath("/f/r");
            a.create().creatingParentsIfNeeded().forPath("/f/r/x/y", b("1"));
            a.setData().forPath("/f/r/x/y", b("2"));
            a.delete().forPath("/f/r/x/y");
            List<String> out = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                String e = events.poll(WAIT_S, TimeUnit.SECONDS);
                if (e == null) break;
                out.add(e);
            }
            return out;
        });
        step("remove persistent recursive watch", () -> { a.watchers().remove(w).forPath("/f/r"); return true; });
        step("delete guaranteed deletingChildren", () -> { a.delete().guaranteed().deletingChildrenIfNeeded().forPath("/f/a"); return a.checkExists().forPath("/f/a") == null; });
        step("delete missing", () -> { a.delete().forPath("/f/missing"); return true; });
    }

    static String last(String path) { return path.substring(path.lastIndexOf('/') + 1); }

    // ------------------------------------------------------------ transactions (multi)
    static void transactions(CuratorFramework a) {
        step("transaction create set check delete", () -> {
            a.create().creatingParentsIfNeeded().forPath("/t/old", b("o"));
            List<CuratorTransactionResult> results = a.transaction().forOperations(
                a.transactionOp().create().forPath("/t/new", b("n")),
                a.transactionOp().setData().forPath("/t", b("parent")),
                a.transactionOp().check().withVersion(1).forPath("/t"),
                a.transactionOp().delete().forPath("/t/old"));
            List<String> out = new ArrayList<>();
            for (CuratorTransactionResult r : results) out.add(r.getType() + " " + r.getForPath() + " " + r.getResultPath() + " " + (r.getResultStat() == null ? "-" : r.getResultStat().getVersion()));
            return out;
        });
        step("transaction failing check applies nothing", () -> a.transaction().forOperations(
            a.transactionOp().create().forPath("/t/never", b("n")),
            a.transactionOp().check().withVersion(7).forPath("/t")));
        step("after the failed transaction", () -> Arrays.asList(a.checkExists().forPath("/t/never") == null, sorted(a.getChildren().forPath("/t"))));
    }

    // ------------------------------------------------------------ locks and semaphores
    static void locks(CuratorFramework a, CuratorFramework bc) {
        InterProcessMutex ma = new InterProcessMutex(a, "/locks/m");
        InterProcessMutex mb = new InterProcessMutex(bc, "/locks/m");
        step("mutex A acquires", () -> ma.acquire(WAIT_S, TimeUnit.SECONDS));
        step("mutex A reenters", () -> ma.acquire(WAIT_S, TimeUnit.SECONDS));
        step("mutex B refused while A holds", () -> mb.acquire(REFUSED_MS, TimeUnit.MILLISECONDS));
        // B's refused attempt deleted its node through B's session.
        step("mutex participants", () -> { sync(a, "/locks/m"); return shapes(ma.getParticipantNodes()); });
        step("mutex A releases twice", () -> { ma.release(); ma.release(); return ma.isAcquiredInThisProcess(); });
        step("mutex B acquires after release", () -> mb.acquire(WAIT_S, TimeUnit.SECONDS));
        step("mutex A waits for B", () -> {
            // A Curator mutex belongs to the thread that acquired it.
            ExecutorService ex = Executors.newSingleThreadExecutor();
            Future<Boolean> got = ex.submit(() -> {
                boolean acquired = ma.acquire(WAIT_S, TimeUnit.SECONDS);
                if (acquired) ma.release();
                return acquired;
            });
            Thread.sleep(REFUSED_MS);
            boolean early = got.isDone();
            mb.release();
            boolean acquired = got.get(WAIT_S, TimeUnit.SECONDS);
            ex.shutdown();
            return Arrays.asList(early, acquired);
        });
        step("mutex release not held", () -> { mb.release(); return true; });

        InterProcessReadWriteLock rwa = new InterProcessReadWriteLock(a, "/locks/rw");
        InterProcessReadWriteLock rwb = new InterProcessReadWriteLock(bc, "/locks/rw");
        step("read locks share", () -> Arrays.asList(rwa.readLock().acquire(WAIT_S, TimeUnit.SECONDS), rwb.readLock().acquire(WAIT_S, TimeUnit.SECONDS)));
        step("write lock waits for readers", () -> rwb.writeLock().acquire(REFUSED_MS, TimeUnit.MILLISECONDS));
        step("write lock after readers leave", () -> {
            rwa.readLock().release();
            rwb.readLock().release();
            boolean got = rwb.writeLock().acquire(WAIT_S, TimeUnit.SECONDS);
            boolean readerRefused = !rwa.readLock().acquire(REFUSED_MS, TimeUnit.MILLISECONDS);
            rwb.writeLock().release();
            return Arrays.asList(got, readerRefused);
        });

        InterProcessSemaphoreV2 sa = new InterProcessSemaphoreV2(a, "/locks/sem", 2);
        InterProcessSemaphoreV2 sb = new InterProcessSemaphoreV2(bc, "/locks/sem", 2);
        step("semaphore leases", () -> {
            Collection<Lease> two = sa.acquire(2, WAIT_S, TimeUnit.SECONDS);
            Lease third = sb.acquire(REFUSED_MS, TimeUnit.MILLISECONDS);
            sync(a, "/locks/sem");
            List<String> nodes = shapes(sa.getParticipantNodes());
            sa.returnAll(two);
            Lease after = sb.acquire(WAIT_S, TimeUnit.SECONDS);
            boolean gotAfter = after != null;
            if (after != null) sb.returnLease(after);
            return Arrays.asList(two == null ? -1 : two.size(), third == null, nodes, gotAfter);
        });
    }

    // ------------------------------------------------------------ leader election
    static void leaders(CuratorFramework a, CuratorFramework bc) {
        LeaderLatch la = new LeaderLatch(a, "/leader", "L1");
        LeaderLatch lb = new LeaderLatch(bc, "/leader", "L2");
        step("first latch leads", () -> { la.start(); return la.await(WAIT_S, TimeUnit.SECONDS); });
        step("second latch waits", () -> { lb.start(); return lb.await(REFUSED_MS, TimeUnit.MILLISECONDS); });
        step("latch participants", () -> {
            // B's own node may reach the list it reads a moment after its start.
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            List<String> ids = new ArrayList<>();
            while (System.nanoTime() < until) {
                ids.clear();
                for (org.apache.curator.framework.recipes.leader.Participant p : la.getParticipants())
                    ids.add(p.getId() + (p.isLeader() ? "*" : ""));
                if (ids.size() == 2) break;
                Thread.sleep(50);
            }
            return Arrays.asList(ids, la.getLeader().getId());
        });
        step("leadership moves on close", () -> { la.close(); return Arrays.asList(lb.await(WAIT_S, TimeUnit.SECONDS), lb.hasLeadership()); });
        step("last latch closes", () -> {
            // A latch deletes its node in the background as it closes.
            lb.close();
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (childrenLeft(bc, "/leader") > 0 && System.nanoTime() < until) Thread.sleep(20);
            return childrenLeft(bc, "/leader");
        });
    }

    /** Children of `path`; none once it is gone. A latch's parent is a
     *  container: the container reaper (every 100 ms in the tests, on both
     *  servers) may delete it between the last child's delete and this
     *  read, in either server, depending on timing alone. */
    static int childrenLeft(CuratorFramework c, String path) throws Exception {
        try {
            return c.getChildren().forPath(path).size();
        } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
            return 0;
        }
    }

    // ------------------------------------------------------------ counters
    static void counters(CuratorFramework a, CuratorFramework bc) {
        DistributedAtomicLong ca = new DistributedAtomicLong(a, "/count/long", new RetryNTimes(10, 10));
        DistributedAtomicLong cb = new DistributedAtomicLong(bc, "/count/long", new RetryNTimes(10, 10));
        step("atomic long increments", () -> {
            List<Object> out = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                AtomicValue<Long> v = ca.increment();
                out.add(v.succeeded() + ":" + v.preValue() + "->" + v.postValue());
            }
            AtomicValue<Long> v = ca.add(10L);
            out.add(v.succeeded() + ":" + v.preValue() + "->" + v.postValue());
            return out;
        });
        step("atomic long compareAndSet", () -> {
            AtomicValue<Long> good = ca.compareAndSet(13L, 100L);
            AtomicValue<Long> stale = ca.compareAndSet(13L, 200L);
            return Arrays.asList(good.succeeded(), good.postValue(), stale.succeeded(), ca.get().postValue());
        });
        step("atomic long from the other session", () -> {
            sync(bc, "/count/long");
            AtomicValue<Long> v = cb.increment();
            return Arrays.asList(v.succeeded(), v.postValue());
        });

        SharedCount sa = new SharedCount(a, "/count/shared", 5);
        SharedCount sb = new SharedCount(bc, "/count/shared", 99);
        step("shared count starts at its seed", () -> { sa.start(); sb.start(); return Arrays.asList(sa.getCount(), sb.getCount()); });
        step("shared count trySetCount", () -> {
            VersionedValue<Integer> seen = sa.getVersionedValue();
            boolean first = sa.trySetCount(seen, 6);
            boolean stale = sa.trySetCount(seen, 7);
            return Arrays.asList(first, stale, sa.getCount());
        });
        step("shared count seen by the other session", () -> {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (sb.getCount() != 6 && System.nanoTime() < until) Thread.sleep(20);
            return sb.getCount();
        });
        step("shared count close", () -> { sa.close(); sb.close(); return true; });
    }

    // ------------------------------------------------------------ CuratorCache (persistent recursive watches)
    static void caches(CuratorFramework a) {
        step("curator cache sees every change in order", () -> {
            a.create().creatingParentsIfNeeded().forPath("/cache/pre", b("0"));
            BlockingQueue<String> events = new LinkedBlockingQueue<>();
            CountDownLatch initialized = new CountDownLatch(1);
            CuratorCache cache = CuratorCache.build(a, "/cache");
            cache.listenable().addListener(CuratorCacheListener.builder()
                .forAll((type, before, after) -> events.add(type + " "
                    + (after != null ? after.getPath() + "=" + s(after.getData()) : before.getPath())))
                .forInitialized(initialized::countDown)
                .build());
            cache.start();
            boolean init = initialized.await(WAIT_S, TimeUnit.SECONDS);
            List<String> initial = new ArrayList<>();
            events.drainTo(initial);
            Collections.sort(initial);
            // One change at a time: the cache reads a node's data after its
            // event, so a node created and deleted at once may show no event.
            List<CompatScenario.Op0> changes = Arrays.asList(
                () -> a.create().forPath("/cache/x", b("1")),
                () -> a.setData().forPath("/cache/x", b("2")),
                () -> a.create().forPath("/cache/x/y", b("3")),
                () -> a.setData().forPath("/cache/x/y", b("4")),
                () -> { a.delete().forPath("/cache/x/y"); return null; },
                () -> { a.delete().forPath("/cache/x"); return null; });
            List<String> later = new ArrayList<>();
            for (CompatScenario.Op0 change : changes) {
                change.run();
                later.add(events.poll(WAIT_S, TimeUnit.SECONDS));
            }
            later.add(events.poll(REFUSED_MS, TimeUnit.MILLISECONDS));
            List<String> held = new ArrayList<>();
            cache.stream().forEach(d -> held.add(d.getPath() + "=" + s(d.getData())));
            Collections.sort(held);
            cache.close();
            return Arrays.asList(init, initial, later, held);
        });
    }

    // ------------------------------------------------------------ queues and barriers
    static void queues(CuratorFramework a, CuratorFramework bc) {
        SimpleDistributedQueue qa = new SimpleDistributedQueue(a, "/queue");
        SimpleDistributedQueue qb = new SimpleDistributedQueue(bc, "/queue");
        step("queue keeps the order", () -> {
            for (int i = 0; i < 4; i++) qa.offer(b("item" + i));
            List<String> out = new ArrayList<>();
            for (int i = 0; i < 4; i++) out.add(s(qb.poll(WAIT_S, TimeUnit.SECONDS)));
            return out;
        });
        step("queue empty poll", () -> s(qb.poll(REFUSED_MS, TimeUnit.MILLISECONDS)));
        step("queue take waits for offer", () -> {
            ExecutorService ex = Executors.newSingleThreadExecutor();
            Future<byte[]> got = ex.submit(() -> qb.take());
            Thread.sleep(REFUSED_MS);
            boolean early = got.isDone();
            qa.offer(b("late"));
            String v = s(got.get(WAIT_S, TimeUnit.SECONDS));
            ex.shutdown();
            return Arrays.asList(early, v);
        });

        DistributedBarrier ba = new DistributedBarrier(a, "/barrier");
        DistributedBarrier bb = new DistributedBarrier(bc, "/barrier");
        step("barrier holds then opens", () -> {
            ba.setBarrier();
            // B may talk to another member, which may not have applied A's
            // create yet (ZooKeeper's followers answer the same way): sync.
            sync(bc, "/barrier");
            boolean held = !bb.waitOnBarrier(REFUSED_MS, TimeUnit.MILLISECONDS);
            ba.removeBarrier();
            boolean open = bb.waitOnBarrier(WAIT_S, TimeUnit.SECONDS);
            return Arrays.asList(held, open);
        });
    }

    // ------------------------------------------------------------ PersistentNode
    static void nodes(CuratorFramework a, CuratorFramework bc) {
        step("persistent ephemeral node", () -> {
            PersistentNode node = new PersistentNode(a, CreateMode.EPHEMERAL, false, "/nodes/me", b("here"));
            node.start();
            boolean made = node.waitForInitialCreate(WAIT_S, TimeUnit.SECONDS);
            String path = node.getActualPath();
            Stat st = a.checkExists().forPath("/nodes/me");
            node.setData(b("moved"));
            String data = s(a.getData().forPath("/nodes/me"));
            node.close();
            return Arrays.asList(made, path, stat(st), data, a.checkExists().forPath("/nodes/me") == null);
        });
        step("persistent protected sequential node", () -> {
            // Under a parent of its own that is not a container: a sequence
            // number counts the parent's child changes, and an emptied
            // container may be reaped (and made anew) at any time.
            a.create().forPath("/pnodes");
            PersistentNode node = new PersistentNode(a, CreateMode.EPHEMERAL_SEQUENTIAL, true, "/pnodes/seq-", b("s"));
            node.start();
            boolean made = node.waitForInitialCreate(WAIT_S, TimeUnit.SECONDS);
            String shape = shape(last(node.getActualPath()));
            node.close();
            return Arrays.asList(made, shape, a.getChildren().forPath("/pnodes").size());
        });
        step("ephemeral of a closed session is gone", () -> {
            CuratorFramework c = open(connect);
            c.create().withMode(CreateMode.EPHEMERAL).forPath("/pnodes/short", b("e"));
            c.close();
            // The close is acknowledged once the session's ephemerals are
            // deleted; A's view of them may lag on another member: sync.
            sync(a, "/pnodes");
            return a.checkExists().forPath("/pnodes/short") == null;
        });
    }
}
