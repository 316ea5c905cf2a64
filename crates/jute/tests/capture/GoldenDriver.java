// Drives a real ZooKeeper Java client through every operation whose wire
// form keel-jute needs golden vectors for. It talks to ZooKeeper through
// capture_proxy.py and names each captured frame via the proxy's control
// socket (see README.md in ../golden for the full procedure).
//
// Usage: java -cp zookeeper.jar:... GoldenDriver PROXY_HOST:PORT CONTROL_PORT

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Op;
import org.apache.zookeeper.OpResult;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.admin.ZooKeeperAdmin;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.Id;
import org.apache.zookeeper.data.Stat;
import org.apache.zookeeper.server.auth.DigestAuthenticationProvider;

public class GoldenDriver {
    static final int SESSION_TIMEOUT_MS = 10000;
    static final String ROOT = "/golden";

    static PrintWriter control;
    static BufferedReader controlIn;

    static void command(String line) throws Exception {
        control.println(line);
        control.flush();
        String answer = controlIn.readLine();
        if (!"ok".equals(answer)) {
            throw new IllegalStateException(line + " -> " + answer);
        }
    }

    static void label(String name) throws Exception {
        command("label " + name);
    }

    static void await(String name) throws Exception {
        command("wait " + name);
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    interface Action {
        void run() throws Exception;
    }

    /** Runs an op that must fail with the given code. */
    static void expectError(String name, KeeperException.Code code, Action action) throws Exception {
        label(name);
        try {
            action.run();
            throw new IllegalStateException(name + ": expected " + code);
        } catch (KeeperException e) {
            if (e.code() != code) {
                throw new IllegalStateException(name + ": expected " + code + " got " + e.code(), e);
            }
        }
        await(name);
    }

    static class StateWatcher implements Watcher {
        volatile CountDownLatch connected = new CountDownLatch(1);

        @Override
        public void process(org.apache.zookeeper.WatchedEvent event) {
            System.out.println("event: " + event);
            if (event.getType() == Event.EventType.None
                    && event.getState() == Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
        }

        void awaitConnected() throws InterruptedException {
            if (!connected.await(20, TimeUnit.SECONDS)) {
                throw new IllegalStateException("not connected");
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String server = args[0];
        int controlPort = Integer.parseInt(args[1]);
        Socket sock = new Socket("127.0.0.1", controlPort);
        control = new PrintWriter(new OutputStreamWriter(sock.getOutputStream(), StandardCharsets.UTF_8));
        controlIn = new BufferedReader(new InputStreamReader(sock.getInputStream(), StandardCharsets.UTF_8));

        mainSession(server);
        adminSession(server);
        authFailedSession(server);
        System.out.println("driver done");
    }

    static void mainSession(String server) throws Exception {
        StateWatcher watcher = new StateWatcher();
        label("connect");
        ZooKeeper zk = new ZooKeeper(server, SESSION_TIMEOUT_MS, watcher);
        watcher.awaitConnected();
        await("connect");

        label("auth_digest");
        zk.addAuthInfo("digest", bytes("keel:secret"));
        await("auth_digest");

        List<ACL> open = ZooDefs.Ids.OPEN_ACL_UNSAFE;
        Stat stat = new Stat();

        label("create_persistent");
        zk.create(ROOT, bytes("root"), open, CreateMode.PERSISTENT);
        label("create_ephemeral");
        zk.create(ROOT + "/eph", bytes("e"), open, CreateMode.EPHEMERAL);
        label("create_persistent_sequential");
        zk.create(ROOT + "/pseq-", bytes("ps"), open, CreateMode.PERSISTENT_SEQUENTIAL);
        label("create_ephemeral_sequential");
        zk.create(ROOT + "/eseq-", bytes("es"), open, CreateMode.EPHEMERAL_SEQUENTIAL);
        label("create_container");
        zk.create(ROOT + "/container", bytes("c"), open, CreateMode.CONTAINER);
        label("create2_with_stat");
        zk.create(ROOT + "/c2", bytes("create2"), open, CreateMode.PERSISTENT, stat);
        label("create2_container_with_stat");
        zk.create(ROOT + "/container2", bytes(""), open, CreateMode.CONTAINER, stat);
        label("create_ttl");
        zk.create(ROOT + "/ttl", bytes("ttl"), open, CreateMode.PERSISTENT_WITH_TTL, stat, 60000);
        label("create_ttl_sequential");
        zk.create(ROOT + "/ttlseq-", bytes("ttls"), open,
                CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL, stat, 120000);
        label("create_null_data");
        zk.create(ROOT + "/nulldata", null, open, CreateMode.PERSISTENT);
        label("create_in_container");
        zk.create(ROOT + "/container/child", bytes("cc"), open, CreateMode.PERSISTENT);

        expectError("create_nodeexists", KeeperException.Code.NODEEXISTS,
                () -> zk.create(ROOT, bytes("dup"), open, CreateMode.PERSISTENT));
        expectError("create_nonode_parent", KeeperException.Code.NONODE,
                () -> zk.create("/missing/child", bytes("x"), open, CreateMode.PERSISTENT));
        expectError("create_ephemeral_child_of_ephemeral", KeeperException.Code.NOCHILDRENFOREPHEMERALS,
                () -> zk.create(ROOT + "/eph/child", bytes("x"), open, CreateMode.PERSISTENT));

        label("get_data_watch");
        zk.getData(ROOT, true, stat);
        label("get_data_null");
        zk.getData(ROOT + "/nulldata", false, stat);
        expectError("get_data_nonode", KeeperException.Code.NONODE,
                () -> zk.getData(ROOT + "/missing", false, new Stat()));
        label("exists_watch");
        zk.exists(ROOT + "/eph", true);
        label("exists_nonode");
        if (zk.exists(ROOT + "/missing", true) != null) {
            throw new IllegalStateException("exists_nonode found a node");
        }
        await("exists_nonode");
        label("get_children2_watch");
        zk.getChildren(ROOT, true, stat);
        label("get_children");
        zk.getChildren(ROOT + "/container", false);

        // Drop the connection while only classic watches are set: the client
        // reconnects with its session id and re-sends auth + SetWatches.
        command("prefix reconnect_setwatches");
        watcher.connected = new CountDownLatch(1);
        command("drop");
        watcher.awaitConnected();
        await("reconnect_setwatches_setWatches");
        command("prefix auto");

        label("set_data");
        zk.setData(ROOT, bytes("changed"), -1);
        expectError("set_data_badversion", KeeperException.Code.BADVERSION,
                () -> zk.setData(ROOT, bytes("x"), 99));

        label("get_all_children_number");
        zk.getAllChildrenNumber(ROOT);
        label("get_ephemerals");
        zk.getEphemerals(ROOT);

        label("create_for_acl");
        zk.create(ROOT + "/acl", bytes("secret"), open, CreateMode.PERSISTENT);
        List<ACL> digestAcl = Arrays.asList(
                new ACL(ZooDefs.Perms.ALL,
                        new Id("digest", DigestAuthenticationProvider.generateDigest("keel:secret"))),
                new ACL(ZooDefs.Perms.READ, ZooDefs.Ids.ANYONE_ID_UNSAFE));
        label("set_acl_digest");
        zk.setACL(ROOT + "/acl", digestAcl, -1);
        label("get_acl");
        zk.getACL(ROOT + "/acl", stat);
        expectError("set_acl_badversion", KeeperException.Code.BADVERSION,
                () -> zk.setACL(ROOT + "/acl", digestAcl, 42));
        expectError("set_acl_invalid", KeeperException.Code.INVALIDACL,
                () -> zk.setACL(ROOT + "/acl",
                        Arrays.asList(new ACL(ZooDefs.Perms.ALL, new Id("bogus", "x"))), -1));

        label("sync");
        CountDownLatch synced = new CountDownLatch(1);
        zk.sync(ROOT, (rc, path, ctx) -> synced.countDown(), null);
        synced.await(10, TimeUnit.SECONDS);
        await("sync");

        label("multi_ok");
        List<OpResult> results = zk.multi(Arrays.asList(
                Op.create(ROOT + "/m1", bytes("m1"), open, CreateMode.PERSISTENT),
                Op.create(ROOT + "/mcontainer", bytes("mc"), open, CreateMode.CONTAINER),
                Op.create(ROOT + "/mttl", bytes("mt"), open, CreateMode.PERSISTENT_WITH_TTL, 30000),
                Op.setData(ROOT + "/m1", bytes("m1b"), 0),
                Op.check(ROOT + "/m1", 1),
                Op.delete(ROOT + "/m1", 1)));
        System.out.println("multi_ok: " + results.size());
        expectError("multi_fail", KeeperException.Code.BADVERSION, () -> zk.multi(Arrays.asList(
                Op.create(ROOT + "/m2", bytes("m2"), open, CreateMode.PERSISTENT),
                Op.check(ROOT, 999),
                Op.delete(ROOT + "/c2", -1))));
        label("multi_read");
        zk.multi(Arrays.asList(
                Op.getData(ROOT),
                Op.getChildren(ROOT + "/container"),
                Op.getData(ROOT + "/missing")));

        label("create_for_persistent_watch");
        zk.create(ROOT + "/pw", bytes("pw"), open, CreateMode.PERSISTENT);
        label("add_watch_persistent");
        zk.addWatch(ROOT + "/pw", AddWatchMode.PERSISTENT);
        label("add_watch_persistent_recursive");
        zk.addWatch(ROOT + "/container", AddWatchMode.PERSISTENT_RECURSIVE);
        label("set_data_persistent_watch");
        zk.setData(ROOT + "/pw", bytes("pw2"), -1);

        // Second drop, now with persistent watches: SetWatches2.
        command("prefix reconnect_setwatches2");
        watcher.connected = new CountDownLatch(1);
        command("drop");
        watcher.awaitConnected();
        await("reconnect_setwatches2_setWatches2");
        command("prefix auto");

        label("who_am_i");
        zk.whoAmI();

        Watcher dataWatcher = event -> System.out.println("data watcher: " + event);
        label("get_data_custom_watcher");
        zk.getData(ROOT + "/c2", dataWatcher, stat);
        label("check_watches");
        zk.removeWatches(ROOT + "/c2", dataWatcher, Watcher.WatcherType.Data, false);
        label("remove_watches");
        zk.removeAllWatches(ROOT + "/pw", Watcher.WatcherType.Any, false);
        expectError("remove_watches_nowatcher", KeeperException.Code.NOWATCHER,
                () -> zk.removeAllWatches(ROOT + "/nulldata", Watcher.WatcherType.Any, false));

        label("delete");
        zk.delete(ROOT + "/nulldata", -1);
        expectError("delete_nonode", KeeperException.Code.NONODE,
                () -> zk.delete(ROOT + "/nulldata", -1));
        expectError("delete_badversion", KeeperException.Code.BADVERSION,
                () -> zk.delete(ROOT + "/c2", 5));
        expectError("delete_notempty", KeeperException.Code.NOTEMPTY,
                () -> zk.delete(ROOT, -1));

        // Idle long enough for the client to send a ping (readTimeout / 2).
        Thread.sleep(SESSION_TIMEOUT_MS * 2 / 3 / 2 + 1500);
        await("ping");

        label("close_session");
        zk.close();
        await("close_session");
    }

    static void adminSession(String server) throws Exception {
        StateWatcher watcher = new StateWatcher();
        label("admin_connect");
        ZooKeeperAdmin admin = new ZooKeeperAdmin(server, SESSION_TIMEOUT_MS, watcher);
        watcher.awaitConnected();
        await("admin_connect");
        label("get_config");
        admin.getConfig(false, new Stat());
        expectError("reconfig_disabled", KeeperException.Code.RECONFIGDISABLED,
                () -> admin.reconfigure("server.2=127.0.0.1:2888:3888;2181", "3", null, -1, new Stat()));
        label("admin_close_session");
        admin.close();
        await("admin_close_session");
    }

    static void authFailedSession(String server) throws Exception {
        StateWatcher watcher = new StateWatcher();
        label("authfail_connect");
        ZooKeeper zk = new ZooKeeper(server, SESSION_TIMEOUT_MS, watcher);
        watcher.awaitConnected();
        await("authfail_connect");
        label("auth_failed");
        zk.addAuthInfo("nosuchscheme", bytes("whatever"));
        await("auth_failed");
        zk.close();
    }
}
