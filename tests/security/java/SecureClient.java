// The official ZooKeeper 3.8 Java client, configured by system properties
// (TLS: zookeeper.client.secure, the Netty socket, key and trust stores;
// SASL: a JAAS file with a Client section), as tests/security drives it.
//
//   java SecureClient CONNECT WAIT_FOR STEP...
//
// WAIT_FOR is the connection state to wait for first (SyncConnected,
// SaslAuthenticated, AuthFailed; at most 30 s, or the system property
// secureclient.wait.seconds). Steps, run in order:
//   create:PATH:DATA[:SCHEME:ID]   a persistent node, ACL world:anyone or SCHEME:ID (all perms)
//   get:PATH                       its data
//   acl:PATH                       its ACL, "scheme:id:perms,..."
//   whoami                         the connection's ids, "scheme:user,..."
// Output: one JSON object per line: {"event": STATE} for every connection
// state, {"waited": STATE, "seen": BOOL}, {"step": STEP, "result": ...}
// (the result, or an error code name such as "NOAUTH"), {"done": true}.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.ClientInfo;
import org.apache.zookeeper.data.Id;
import org.apache.zookeeper.data.Stat;

public class SecureClient {
    static final Object LOCK = new Object();
    static final List<String> STATES = new ArrayList<>();

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\');
            }
            b.append(c < 0x20 ? ' ' : c);
        }
        return b.append('"').toString();
    }

    static void print(String json) {
        synchronized (LOCK) {
            System.out.println(json);
            System.out.flush();
        }
    }

    static String run(ZooKeeper zk, String step) throws Exception {
        String[] parts = step.split(":", 5);
        switch (parts[0]) {
            case "create": {
                List<ACL> acl = ZooDefs.Ids.OPEN_ACL_UNSAFE;
                if (parts.length == 5) {
                    acl = Collections.singletonList(new ACL(ZooDefs.Perms.ALL, new Id(parts[3], parts[4])));
                }
                return zk.create(parts[1], parts[2].getBytes(StandardCharsets.UTF_8), acl, CreateMode.PERSISTENT);
            }
            case "get":
                return new String(zk.getData(parts[1], false, null), StandardCharsets.UTF_8);
            case "acl": {
                StringBuilder b = new StringBuilder();
                for (ACL entry : zk.getACL(parts[1], new Stat())) {
                    b.append(b.length() == 0 ? "" : ",").append(entry.getId().getScheme()).append(':')
                        .append(entry.getId().getId()).append(':').append(entry.getPerms());
                }
                return b.toString();
            }
            case "whoami": {
                StringBuilder b = new StringBuilder();
                for (ClientInfo info : zk.whoAmI()) {
                    b.append(b.length() == 0 ? "" : ",").append(info.getAuthScheme()).append(':').append(info.getUser());
                }
                return b.toString();
            }
            default:
                throw new IllegalArgumentException("unknown step " + step);
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String waitFor = args[1];
        ZooKeeper zk = new ZooKeeper(connect, 10000, event -> {
            if (event.getType() == Watcher.Event.EventType.None) {
                synchronized (LOCK) {
                    STATES.add(event.getState().name());
                    LOCK.notifyAll();
                }
                print("{\"event\": " + quote(event.getState().name()) + "}");
            }
        });
        long waitSeconds = Long.getLong("secureclient.wait.seconds", 30L);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(waitSeconds);
        boolean seen;
        synchronized (LOCK) {
            while (!STATES.contains(waitFor) && System.nanoTime() < deadline) {
                LOCK.wait(100);
            }
            seen = STATES.contains(waitFor);
        }
        print("{\"waited\": " + quote(waitFor) + ", \"seen\": " + seen + "}");
        for (int i = 2; i < args.length; i++) {
            String result;
            try {
                result = run(zk, args[i]);
            } catch (KeeperException e) {
                result = e.code().name();
            }
            print("{\"step\": " + quote(args[i]) + ", \"result\": " + quote(result) + "}");
        }
        zk.close();
        print("{\"done\": true}");
        System.exit(0);
    }
}
