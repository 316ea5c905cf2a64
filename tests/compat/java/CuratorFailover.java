// Curator's InterProcessMutex guarding a counter, under a cluster whose
// leader the test kills: workers, each with a session of its own, take the
// lock, read the counter and write it back one higher with the version
// they read (a compare-and-set), and let go.
// Usage: java -cp zookeeper.jar:...:curator-*.jar:guava.jar:. CuratorFailover CONNECT SECONDS WORKERS
// Prints a progress line a second ({"t": s, "acknowledged": n}) and a last
// line {"summary": {...}}:
//   acquired      critical sections entered;
//   acknowledged  counter writes the server acknowledged;
//   unknown       writes whose outcome the worker cannot know (the
//                 connection was lost while it was in flight);
//   overlaps      a worker entered while another was inside (this JVM's
//                 own count): the lock was not exclusive;
//   stale         a write refused for its version: the counter moved
//                 under the lock, the holder read an old value, or a write
//                 of an earlier holder was applied after that holder let
//                 go (the counter is read and written through the session's
//                 ZooKeeper handle, never retried: a lost connection makes
//                 the write's outcome unknown, not a conflict);
//   expired       sessions that expired (none may, in an outage shorter
//                 than the session timeout);
//   final         the counter read afterwards by a fresh session (synced).
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

public class CuratorFailover {
    static final String LOCK = "/failover/lock";
    static final String COUNTER = "/failover/counter";
    static final int SESSION_TIMEOUT_MS = 15_000;
    static final long ACQUIRE_TIMEOUT_S = 10;
    static final int PROBLEMS_KEPT = 10;

    static final AtomicInteger inside = new AtomicInteger();
    static final AtomicLong acquired = new AtomicLong();
    static final AtomicLong acknowledged = new AtomicLong();
    static final AtomicLong unknown = new AtomicLong();
    static final AtomicLong overlaps = new AtomicLong();
    static final AtomicLong stale = new AtomicLong();
    static final AtomicLong expired = new AtomicLong();
    static final AtomicLong refused = new AtomicLong();
    static final AtomicLong errors = new AtomicLong();
    static final Queue<String> problems = new ConcurrentLinkedQueue<>();

    static CuratorFramework open(String connect) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
            .connectString(connect)
            .sessionTimeoutMs(SESSION_TIMEOUT_MS)
            .connectionTimeoutMs(20_000)
            .retryPolicy(new ExponentialBackoffRetry(50, 10, 1_000))
            .build();
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) throw new RuntimeException("connect timeout");
        return c;
    }

    static void problem(String what) {
        if (problems.size() < PROBLEMS_KEPT) problems.add(what);
        System.out.println("{\"problem\":" + CompatScenario.q(what) + "}");
        System.out.flush();
    }

    static String sessionOf(CuratorFramework c) {
        try {
            return Long.toHexString(c.getZookeeperClient().getZooKeeper().getSessionId());
        } catch (Exception e) {
            return "?";
        }
    }

    /** The lock's queue: each node and the session that owns it. */
    static String queue(CuratorFramework c) {
        try {
            List<String> out = new ArrayList<>();
            List<String> children = c.getChildren().forPath(LOCK);
            Collections.sort(children, Comparator.comparing(n -> n.substring(n.length() - 10)));
            for (String child : children) {
                Stat st = c.checkExists().forPath(LOCK + "/" + child);
                out.add(child.substring(child.length() - 10) + "@0x" + (st == null ? "gone" : Long.toHexString(st.getEphemeralOwner())));
            }
            return out.toString();
        } catch (Exception e) {
            return "unreadable: " + e;
        }
    }

    /** One worker's loop until the deadline (System.nanoTime()). */
    static void work(String connect, int id, long deadline) {
        CuratorFramework c;
        try {
            c = open(connect);
        } catch (Exception e) {
            errors.incrementAndGet();
            problem("worker " + id + " could not connect: " + e);
            return;
        }
        c.getConnectionStateListenable().addListener((client, state) -> {
            if (state == ConnectionState.LOST) {
                expired.incrementAndGet();
                problem("worker " + id + "'s session was lost");
            }
        });
        InterProcessMutex lock = new InterProcessMutex(c, LOCK);
        while (System.nanoTime() < deadline) {
            boolean got;
            try {
                got = lock.acquire(ACQUIRE_TIMEOUT_S, TimeUnit.SECONDS);
            } catch (Exception e) {
                errors.incrementAndGet();
                continue;
            }
            if (!got) {
                refused.incrementAndGet();
                problem("worker " + id + " (session 0x" + sessionOf(c) + " on "
                    + c.getZookeeperClient().getCurrentConnectionString() + ") waited " + ACQUIRE_TIMEOUT_S
                    + " s for the lock; its queue: " + queue(c));
                continue;
            }
            acquired.incrementAndGet();
            if (inside.incrementAndGet() != 1) {
                overlaps.incrementAndGet();
                problem("worker " + id + " entered while another held the lock");
            }
            try {
                ZooKeeper zk = c.getZookeeperClient().getZooKeeper();
                Stat st = new Stat();
                long value = Long.parseLong(new String(zk.getData(COUNTER, false, st), StandardCharsets.UTF_8));
                zk.setData(COUNTER, Long.toString(value + 1).getBytes(StandardCharsets.UTF_8), st.getVersion());
                acknowledged.incrementAndGet();
            } catch (KeeperException.BadVersionException e) {
                stale.incrementAndGet();
                problem("worker " + id + ": the counter moved under the lock");
            } catch (Exception e) {
                unknown.incrementAndGet();
            } finally {
                inside.decrementAndGet();
                try {
                    lock.release();
                } catch (Exception e) {
                    errors.incrementAndGet();
                }
            }
        }
        c.close();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        long seconds = Long.parseLong(args[1]);
        int workers = Integer.parseInt(args[2]);
        try (CuratorFramework setup = open(connect)) {
            setup.create().creatingParentsIfNeeded().forPath(COUNTER, "0".getBytes(StandardCharsets.UTF_8));
        }
        long start = System.nanoTime();
        long deadline = start + TimeUnit.SECONDS.toNanos(seconds);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < workers; i++) {
            final int id = i;
            Thread t = new Thread(() -> work(connect, id, deadline), "worker-" + i);
            t.start();
            threads.add(t);
        }
        while (System.nanoTime() < deadline) {
            Thread.sleep(1000);
            long t = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - start);
            System.out.println("{\"t\":" + t + ",\"acknowledged\":" + acknowledged.get() + "}");
            System.out.flush();
        }
        for (Thread t : threads) t.join(TimeUnit.SECONDS.toMillis(ACQUIRE_TIMEOUT_S + 30));
        long finalValue;
        try (CuratorFramework check = open(connect)) {
            CountDownLatch synced = new CountDownLatch(1);
            check.sync().inBackground((client, event) -> synced.countDown()).forPath(COUNTER);
            synced.await(20, TimeUnit.SECONDS);
            finalValue = Long.parseLong(new String(check.getData().forPath(COUNTER), StandardCharsets.UTF_8));
        }
        StringBuilder p = new StringBuilder("[");
        for (String s : problems) p.append(p.length() > 1 ? "," : "").append(CompatScenario.q(s));
        p.append(']');
        System.out.println("{\"summary\":{\"acquired\":" + acquired + ",\"acknowledged\":" + acknowledged
            + ",\"unknown\":" + unknown + ",\"overlaps\":" + overlaps + ",\"stale\":" + stale
            + ",\"expired\":" + expired + ",\"refused\":" + refused + ",\"errors\":" + errors
            + ",\"final\":" + finalValue + ",\"problems\":" + p + "}}");
        System.out.flush();
        System.exit(0);
    }
}
