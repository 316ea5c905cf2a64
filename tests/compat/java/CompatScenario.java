// Differential scenario driven by the official Java client (ZooKeeper 3.8).
// Usage: java -cp zookeeper.jar:...:. CompatScenario HOST:PORT[,HOST:PORT...]
// (a connect string listing every member when the server is a cluster; the
// client picks one at random, so before a session reads what ANOTHER session
// wrote it calls xsync(), ZooKeeper's sync, as a client of an ensemble must)
// Prints one JSON object per line: {"step": "...", "result": ...} or
// {"session": "NAME", "id": <long>} (so the harness can normalise session ids).
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;

import org.apache.zookeeper.*;
import org.apache.zookeeper.data.*;
import org.apache.zookeeper.server.auth.DigestAuthenticationProvider;

public class CompatScenario {
    static final String B = "/jcompat";
    static final List<ACL> OPEN = ZooDefs.Ids.OPEN_ACL_UNSAFE;
    // Long enough that the steps between creating the TTL nodes and listing
    // them (#80, #82) finish first even on a loaded machine (3 s was not).
    static final long TTL_MS = 10000;

    // ------------------------------------------------------------ JSON output
    static String q(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20 || c > 0x7e) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        return sb.append('"').toString();
    }

    static String j(Object o) {
        if (o == null) return "null";
        if (o instanceof RawJson) return ((RawJson) o).s;
        if (o instanceof String) return q((String) o);
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof byte[]) return "{\"bytes\":" + q(new String((byte[]) o, StandardCharsets.ISO_8859_1)) + "}";
        if (o instanceof Stat) {
            Stat s = (Stat) o;
            return "{\"stat\":{\"czxid\":" + s.getCzxid() + ",\"mzxid\":" + s.getMzxid() + ",\"pzxid\":" + s.getPzxid()
                + ",\"ctime\":" + s.getCtime() + ",\"mtime\":" + s.getMtime() + ",\"version\":" + s.getVersion()
                + ",\"cversion\":" + s.getCversion() + ",\"aversion\":" + s.getAversion()
                + ",\"ephemeralOwner\":" + s.getEphemeralOwner() + ",\"dataLength\":" + s.getDataLength()
                + ",\"numChildren\":" + s.getNumChildren() + "}}";
        }
        if (o instanceof ACL) {
            ACL a = (ACL) o;
            return "{\"acl\":[" + a.getPerms() + "," + q(a.getId().getScheme()) + "," + q(a.getId().getId()) + "]}";
        }
        if (o instanceof WatchedEvent) {
            WatchedEvent e = (WatchedEvent) o;
            return "{\"type\":" + q(e.getType().name()) + ",\"state\":" + q(e.getState().name()) + ",\"path\":" + q(e.getPath()) + "}";
        }
        if (o instanceof KeeperException) {
            KeeperException e = (KeeperException) o;
            return "{\"err\":" + q(e.code().name()) + ",\"code\":" + e.code().intValue() + ",\"path\":" + q(e.getPath()) + "}";
        }
        if (o instanceof OpResult) return opResult((OpResult) o);
        if (o instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                sb.append(q(String.valueOf(e.getKey()))).append(':').append(j(e.getValue()));
            }
            return sb.append('}').toString();
        }
        if (o instanceof Collection) {
            StringBuilder sb = new StringBuilder("[");
            boolean first = true;
            for (Object x : (Collection<?>) o) {
                if (!first) sb.append(',');
                first = false;
                sb.append(j(x));
            }
            return sb.append(']').toString();
        }
        if (o instanceof Throwable) return "{\"exception\":" + q(o.getClass().getName()) + "}";
        return q(o.toString());
    }

    static String opResult(OpResult r) {
        if (r instanceof OpResult.CreateResult) {
            OpResult.CreateResult c = (OpResult.CreateResult) r;
            return "{\"create\":" + q(c.getPath()) + ",\"stat\":" + j(c.getStat()) + "}";
        }
        if (r instanceof OpResult.SetDataResult) return "{\"setData\":" + j(((OpResult.SetDataResult) r).getStat()) + "}";
        if (r instanceof OpResult.DeleteResult) return "{\"delete\":true}";
        if (r instanceof OpResult.CheckResult) return "{\"check\":true}";
        if (r instanceof OpResult.GetDataResult) {
            OpResult.GetDataResult g = (OpResult.GetDataResult) r;
            return "{\"getData\":" + j(g.getData()) + ",\"stat\":" + j(g.getStat()) + "}";
        }
        if (r instanceof OpResult.GetChildrenResult) {
            List<String> ch = new ArrayList<>(((OpResult.GetChildrenResult) r).getChildren());
            Collections.sort(ch);
            return "{\"getChildren\":" + j(ch) + "}";
        }
        if (r instanceof OpResult.ErrorResult) {
            int e = ((OpResult.ErrorResult) r).getErr();
            return "{\"error\":" + q(KeeperException.Code.get(e).name()) + ",\"code\":" + e + "}";
        }
        return q(r.getClass().getName());
    }

    interface Op0 { Object run() throws Exception; }

    static void step(String label, Op0 op) {
        String res;
        try {
            res = "{\"ok\":" + j(op.run()) + "}";
        } catch (KeeperException e) {
            StringBuilder sb = new StringBuilder("{\"error\":" + j(e));
            if (e.getResults() != null) sb.append(",\"results\":").append(j(e.getResults()));
            res = sb.append('}').toString();
        } catch (Exception e) {
            res = "{\"error\":" + j(e) + "}";
        }
        System.out.println("{\"step\":" + q(label) + ",\"result\":" + res + "}");
        System.out.flush();
    }

    static void record(String label, Object value) {
        System.out.println("{\"step\":" + q(label) + ",\"result\":" + j(value) + "}");
        System.out.flush();
    }

    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    // ------------------------------------------------------------ watchers
    static class Rec implements Watcher {
        final String name;
        final List<String> events = Collections.synchronizedList(new ArrayList<>());
        Rec(String name) { this.name = name; }
        public void process(WatchedEvent e) {
            if (e.getType() == Event.EventType.None) return; // connection state changes are noise here
            events.add(j(e));
        }
    }

    static String connect;

    static ZooKeeper open(String name, int timeoutMs) throws Exception {
        CountDownLatch up = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(connect, timeoutMs, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) up.countDown();
        });
        if (!up.await(20, TimeUnit.SECONDS)) throw new RuntimeException("connect timeout");
        System.out.println("{\"session\":" + q(name) + ",\"id\":" + zk.getSessionId() + "}");
        return zk;
    }

    // sync: this session's server catches up with the leader (a no-op on a
    // standalone server). Returns once the reply is in.
    static void xsync(ZooKeeper zk) throws Exception {
        CountDownLatch l = new CountDownLatch(1);
        zk.sync("/", (rc, path, ctx) -> l.countDown(), null);
        l.await(10, TimeUnit.SECONDS);
    }

    // Every notification the server sent before now has been delivered to
    // watchers once an async callback issued now has run (same event thread).
    // The sync first: on a cluster, this session's server sends the
    // notifications for another session's write only once it has applied it.
    static void barrier(ZooKeeper zk) throws Exception {
        xsync(zk);
        CountDownLatch l = new CountDownLatch(1);
        zk.exists("/", false, (rc, path, ctx, stat) -> l.countDown(), null);
        l.await(10, TimeUnit.SECONDS);
    }

    static List<String> drain(ZooKeeper zk, Rec r, int expect) throws Exception {
        barrier(zk);
        long deadline = System.currentTimeMillis() + 5000;
        while (r.events.size() < expect && System.currentTimeMillis() < deadline) Thread.sleep(20);
        List<String> out;
        synchronized (r.events) { out = new ArrayList<>(r.events); r.events.clear(); }
        return out;
    }

    static String drainJson(ZooKeeper zk, Rec r, int expect) throws Exception {
        return "[" + String.join(",", drain(zk, r, expect)) + "]";
    }

    static final class RawJson { final String s; RawJson(String s) { this.s = s; } }

    static Object raw(String json) { return new RawJson(json); }

    static List<String> sorted(List<String> l) { List<String> c = new ArrayList<>(l); Collections.sort(c); return c; }

    public static void main(String[] args) throws Exception {
        connect = args[0];
        ZooKeeper a = open("A", 10000);
        ZooKeeper bz = open("B", 10000);

        // -------------------------------------------------- create modes
        step("create base", () -> a.create(B, b("j"), OPEN, CreateMode.PERSISTENT));
        step("create base again", () -> a.create(B, b("j"), OPEN, CreateMode.PERSISTENT));
        Stat st = new Stat();
        step("create with stat", () -> { Stat s = new Stat(); String p = a.create(B + "/s", b("x"), OPEN, CreateMode.PERSISTENT, s); return Arrays.asList(p, s); });
        step("create null data", () -> a.create(B + "/null", null, OPEN, CreateMode.PERSISTENT));
        step("getData null data", () -> { Stat s = new Stat(); byte[] d = a.getData(B + "/null", false, s); return Arrays.asList(d == null ? "NULL" : j(d), s); });
        for (int i = 0; i < 3; i++) {
            final int k = i;
            step("create persistent sequential " + i, () -> a.create(B + "/seq-", b("" + k), OPEN, CreateMode.PERSISTENT_SEQUENTIAL));
        }
        step("delete seq-0000000003", () -> { a.delete(B + "/seq-0000000003", -1); return true; });
        step("create sequential after delete", () -> a.create(B + "/seq-", null, OPEN, CreateMode.PERSISTENT_SEQUENTIAL));
        step("create ephemeral", () -> a.create(B + "/eph", b("e"), OPEN, CreateMode.EPHEMERAL));
        step("create ephemeral sequential", () -> a.create(B + "/eseq-", b("e"), OPEN, CreateMode.EPHEMERAL_SEQUENTIAL));
        step("create child of ephemeral", () -> a.create(B + "/eph/c", b(""), OPEN, CreateMode.PERSISTENT));
        step("create container", () -> a.create(B + "/cont", b(""), OPEN, CreateMode.CONTAINER));
        step("create TTL", () -> { Stat s = new Stat(); return Arrays.asList(a.create(B + "/ttl", b(""), OPEN, CreateMode.PERSISTENT_WITH_TTL, s, TTL_MS), s); });
        step("create TTL sequential", () -> a.create(B + "/ttlseq-", b(""), OPEN, CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL, null, TTL_MS));
        step("create TTL with ttl 0", () -> a.create(B + "/ttl0", b(""), OPEN, CreateMode.PERSISTENT_WITH_TTL, null, 0));
        step("create under missing parent", () -> a.create(B + "/no/such", b(""), OPEN, CreateMode.PERSISTENT));
        step("create invalid path (client-side)", () -> a.create(B + "/bad/", b(""), OPEN, CreateMode.PERSISTENT));
        step("exists eph", () -> a.exists(B + "/eph", false));
        step("getChildren2 base", () -> { Stat s = new Stat(); List<String> c = a.getChildren(B, false, s); return Arrays.asList(sorted(c), s); });
        step("getEphemerals base", () -> sorted(a.getEphemerals(B)));
        step("getEphemerals all", () -> sorted(a.getEphemerals()));
        step("getAllChildrenNumber base", () -> a.getAllChildrenNumber(B));

        // -------------------------------------------------- set/get/versions
        step("setData v0", () -> a.setData(B + "/s", b("y"), 0));
        step("setData stale version", () -> a.setData(B + "/s", b("z"), 0));
        step("getData", () -> { Stat s = new Stat(); byte[] d = a.getData(B + "/s", false, s); return Arrays.asList(d, s); });
        step("delete bad version", () -> { a.delete(B + "/s", 5); return true; });
        step("delete non-empty", () -> { a.delete(B, -1); return true; });

        // -------------------------------------------------- one-shot watches
        Rec w = new Rec("w");
        step("exists watch missing", () -> bz.exists(B + "/w", w));
        step("create w", () -> a.create(B + "/w", b("0"), OPEN, CreateMode.PERSISTENT));
        record("events after create", raw(drainJson(bz, w, 1)));
        step("getData watch", () -> bz.getData(B + "/w", w, null));
        step("getChildren watch", () -> bz.getChildren(B + "/w", w));
        step("set w", () -> a.setData(B + "/w", b("1"), -1));
        step("set w again", () -> a.setData(B + "/w", b("2"), -1));
        step("create w/c", () -> a.create(B + "/w/c", null, OPEN, CreateMode.PERSISTENT));
        record("events after set+set+child", raw(drainJson(bz, w, 2)));
        step("getData watch again", () -> bz.getData(B + "/w", w, null));
        step("removeWatches data", () -> { bz.removeWatches(B + "/w", w, Watcher.WatcherType.Data, false); return true; });
        step("removeWatches data again", () -> { bz.removeWatches(B + "/w", w, Watcher.WatcherType.Data, false); return true; });
        record("events after removeWatches (local DataWatchRemoved)", raw(drainJson(bz, w, 1)));
        step("set w after remove", () -> a.setData(B + "/w", b("3"), -1));
        record("events after set (none)", raw(drainJson(bz, w, 0)));

        // -------------------------------------------------- persistent watches
        Rec pw = new Rec("pw");
        step("addWatch persistent recursive", () -> { bz.addWatch(B + "/w", pw, AddWatchMode.PERSISTENT_RECURSIVE); return true; });
        step("set w (recursive)", () -> a.setData(B + "/w", b("4"), -1));
        step("create w/c/d", () -> a.create(B + "/w/c/d", null, OPEN, CreateMode.PERSISTENT));
        step("delete w/c/d", () -> { a.delete(B + "/w/c/d", -1); return true; });
        record("events recursive", raw(drainJson(bz, pw, 3)));
        Rec pp = new Rec("pp");
        step("addWatch persistent", () -> { bz.addWatch(B + "/w/c", pp, AddWatchMode.PERSISTENT); return true; });
        step("create w/c/e", () -> a.create(B + "/w/c/e", null, OPEN, CreateMode.PERSISTENT));
        step("set w/c", () -> a.setData(B + "/w/c", b("x"), -1));
        record("events persistent", raw(drainJson(bz, pp, 2)));
        record("events recursive meanwhile", raw(drainJson(bz, pw, 2)));
        step("removeAllWatches recursive", () -> { bz.removeAllWatches(B + "/w", Watcher.WatcherType.Any, false); return true; });
        step("removeWatches persistent", () -> { bz.removeWatches(B + "/w/c", pp, Watcher.WatcherType.Any, false); return true; });
        record("events after removals", raw("{\"pw\":[" + String.join(",", drain(bz, pw, 1)) + "],\"pp\":[" + String.join(",", drain(bz, pp, 1)) + "]}"));
        step("set w after removals", () -> a.setData(B + "/w", b("5"), -1));
        record("events after removal (none)", raw(drainJson(bz, pw, 0)));

        // -------------------------------------------------- multi / multiRead
        step("multi ok", () -> a.multi(Arrays.asList(
            Op.create(B + "/m", b("m"), OPEN, CreateMode.PERSISTENT),
            Op.create(B + "/m/s-", null, OPEN, CreateMode.PERSISTENT_SEQUENTIAL),
            Op.setData(B + "/m", b("n"), 0),
            Op.check(B + "/m", 1),
            Op.delete(B + "/w/c/e", -1))));
        step("multi fail", () -> a.multi(Arrays.asList(
            Op.create(B + "/m2", null, OPEN, CreateMode.PERSISTENT),
            Op.check(B + "/m", 7),
            Op.delete(B + "/m", -1))));
        step("multiRead", () -> a.multi(Arrays.asList(
            Op.getData(B + "/m"), Op.getChildren(B + "/m"), Op.getData(B + "/nope"), Op.getChildren(B + "/w"))));
        step("multi mixing read and write (invalid)", () -> a.multi(Arrays.asList(
            Op.getData(B + "/m"), Op.setData(B + "/m", b("x"), -1))));
        step("transaction API", () -> a.transaction().create(B + "/t", null, OPEN, CreateMode.PERSISTENT).setData(B + "/t", b("t"), 0).commit());

        // -------------------------------------------------- ACL
        ZooKeeper au = open("Auth", 10000);
        au.addAuthInfo("digest", b("bob:pw"));
        List<ACL> bob = Collections.singletonList(new ACL(ZooDefs.Perms.ALL, new Id("digest", DigestAuthenticationProvider.generateDigest("bob:pw"))));
        step("create bob node", () -> au.create(B + "/bob", b("secret"), bob, CreateMode.PERSISTENT));
        xsync(bz);
        step("getData no auth", () -> bz.getData(B + "/bob", false, null));
        step("getData with auth", () -> au.getData(B + "/bob", false, null));
        step("getACL", () -> { Stat s = new Stat(); return Arrays.asList(au.getACL(B + "/bob", s), s); });
        step("setACL bad version", () -> au.setACL(B + "/bob", OPEN, 3));
        step("setACL", () -> au.setACL(B + "/bob", ZooDefs.Ids.READ_ACL_UNSAFE, 0));
        step("create CREATOR_ALL_ACL without auth", () -> bz.create(B + "/creator", null, ZooDefs.Ids.CREATOR_ALL_ACL, CreateMode.PERSISTENT));
        step("create CREATOR_ALL_ACL with auth", () -> au.create(B + "/creator", null, ZooDefs.Ids.CREATOR_ALL_ACL, CreateMode.PERSISTENT));
        step("getACL creator", () -> au.getACL(B + "/creator", null));
        ZooKeeper su = open("Super", 10000);
        su.addAuthInfo("digest", b("super:test"));
        step("super setData creator", () -> su.setData(B + "/creator", b("s"), -1));

        // -------------------------------------------------- async API + sync + config
        CompletableFuture<String> f = new CompletableFuture<>();
        a.getData(B + "/m", false, (rc, path, ctx, data, stat) -> f.complete(rc + " " + path + " " + ctx + " " + new String(data, StandardCharsets.UTF_8) + " v" + stat.getVersion()), "ctx1");
        record("async getData", f.get(10, TimeUnit.SECONDS));
        CompletableFuture<String> f2 = new CompletableFuture<>();
        a.getData(B + "/nope", false, (rc, path, ctx, data, stat) -> f2.complete(rc + " " + path + " " + ctx + " " + (data == null) + " " + (stat == null)), "ctx2");
        record("async getData missing", f2.get(10, TimeUnit.SECONDS));
        CompletableFuture<String> f3 = new CompletableFuture<>();
        a.sync(B, (rc, path, ctx) -> f3.complete(rc + " " + path), null);
        record("sync", f3.get(10, TimeUnit.SECONDS));
        step("getConfig", () -> { Stat s = new Stat(); byte[] d = a.getConfig(false, s); return Arrays.asList(d, s); });
        step("exists /zookeeper/quota", () -> a.exists("/zookeeper/quota", false));

        // -------------------------------------------------- ephemerals vanish on close
        Rec ew = new Rec("ew");
        xsync(bz);
        step("B watches eph", () -> bz.exists(B + "/eph", ew));
        step("B child-watches base", () -> sorted(bz.getChildren(B, ew)));
        a.close();
        record("events after A closed", raw(drainJson(bz, ew, 2)));
        step("children after A closed", () -> sorted(bz.getChildren(B, false)));

        // -------------------------------------------------- container / TTL cleanup
        step("create child in container", () -> bz.create(B + "/cont/c", null, OPEN, CreateMode.PERSISTENT));
        step("delete child in container", () -> { bz.delete(B + "/cont/c", -1); return true; });
        long deadline = System.currentTimeMillis() + 6000;
        while (bz.exists(B + "/cont", false) != null && System.currentTimeMillis() < deadline) Thread.sleep(50);
        record("container removed", bz.exists(B + "/cont", false) == null);
        deadline = System.currentTimeMillis() + TTL_MS + 10000;
        while (bz.exists(B + "/ttl", false) != null && System.currentTimeMillis() < deadline) Thread.sleep(50);
        record("ttl removed", bz.exists(B + "/ttl", false) == null);
        deadline = System.currentTimeMillis() + 10000;
        while (!sorted(bz.getChildren(B, false)).stream().noneMatch(c -> c.startsWith("ttlseq-")) && System.currentTimeMillis() < deadline) Thread.sleep(50);
        step("children at end", () -> sorted(bz.getChildren(B, false)));

        au.close();
        su.close();
        bz.close();
        System.out.println("{\"step\":\"done\",\"result\":true}");
    }
}
