import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;

/**
 * The metadata work of a Kafka broker in ZooKeeper mode, timed:
 * KafkaTopics BOOTSTRAP TOPICS PARTITIONS. Creates TOPICS topics of
 * PARTITIONS partitions each (in requests of BATCH_TOPICS), waits until
 * every partition has a leader (the controller has written each
 * partition's state to ZooKeeper and told the broker), then deletes them
 * all and waits until the broker lists none. Prints "create_s S" and
 * "delete_s S"; a step that does not finish within STEP_TIMEOUT_S throws.
 */
public class KafkaTopics {
    static final int BATCH_TOPICS = 50;
    static final long STEP_TIMEOUT_S = 600;
    static final long POLL_MS = 20;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        int topics = Integer.parseInt(args[1]);
        int partitions = Integer.parseInt(args[2]);
        List<String> names = new ArrayList<>();
        for (int i = 0; i < topics; i++) {
            names.add(String.format("bench-%05d", i));
        }
        try (Admin admin = Admin.create(Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) TimeUnit.SECONDS.toMillis(STEP_TIMEOUT_S)))) {
            long started = System.nanoTime();
            for (int at = 0; at < topics; at += BATCH_TOPICS) {
                List<NewTopic> batch = new ArrayList<>();
                for (String name : names.subList(at, Math.min(topics, at + BATCH_TOPICS))) {
                    batch.add(new NewTopic(name, partitions, (short) 1));
                }
                admin.createTopics(batch).all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
            }
            waitForLeaders(admin, names, started);
            System.out.printf("create_s %.3f%n", (System.nanoTime() - started) / 1e9);
            started = System.nanoTime();
            admin.deleteTopics(names).all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
            waitGone(admin, names, started);
            System.out.printf("delete_s %.3f%n", (System.nanoTime() - started) / 1e9);
        }
    }

    static void waitForLeaders(Admin admin, List<String> names, long started) throws Exception {
        Set<String> pending = new HashSet<>(names);
        while (!pending.isEmpty()) {
            checkDeadline(started, pending.size() + " topics without leaders");
            Map<String, KafkaFuture<TopicDescription>> asked = admin.describeTopics(pending).topicNameValues();
            for (Map.Entry<String, KafkaFuture<TopicDescription>> entry : asked.entrySet()) {
                TopicDescription d;
                try {
                    d = entry.getValue().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof UnknownTopicOrPartitionException) {
                        continue; // not in the broker's metadata yet
                    }
                    throw e;
                }
                boolean led = true;
                for (TopicPartitionInfo p : d.partitions()) {
                    led &= p.leader() != null;
                }
                if (led) {
                    pending.remove(d.name());
                }
            }
            if (!pending.isEmpty()) {
                Thread.sleep(POLL_MS);
            }
        }
    }

    static void waitGone(Admin admin, List<String> names, long started) throws Exception {
        while (true) {
            Set<String> left = new HashSet<>(admin.listTopics().names().get(STEP_TIMEOUT_S, TimeUnit.SECONDS));
            left.retainAll(names);
            if (left.isEmpty()) {
                return;
            }
            checkDeadline(started, left.size() + " topics not deleted");
            Thread.sleep(POLL_MS);
        }
    }

    static void checkDeadline(long started, String what) {
        if (System.nanoTime() - started > TimeUnit.SECONDS.toNanos(STEP_TIMEOUT_S)) {
            throw new IllegalStateException(what + " after " + STEP_TIMEOUT_S + " s");
        }
    }
}
