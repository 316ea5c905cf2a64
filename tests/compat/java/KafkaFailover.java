import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The client side of a Kafka controller failover (two brokers on one
 * ZooKeeper or Keel), one step per run:
 *
 *   KafkaFailover create  BOOTSTRAP TOPIC PARTITIONS REPLICAS
 *   KafkaFailover produce BOOTSTRAP TOPIC FROM COUNT
 *   KafkaFailover consume BOOTSTRAP TOPIC COUNT
 *
 * produce writes keys kFROM..k(FROM+COUNT-1), each acknowledged (acks=all,
 * idempotent) before the next is sent; consume reads every partition from
 * its beginning without a consumer group (the group coordinator may sit on
 * the broker that died) and checks that it finds exactly keys k0..k(COUNT-1),
 * each with its value. Prints one line; exits 1 on a missing, wrong or extra
 * record, or with the stack trace of a step that failed or timed out.
 */
public class KafkaFailover {
    static final long STEP_TIMEOUT_S = 90;
    static final long CONSUME_TIMEOUT_MS = 90_000;

    public static void main(String[] args) throws Exception {
        String step = args[0];
        Properties common = new Properties();
        common.put("bootstrap.servers", args[1]);
        String topic = args[2];
        switch (step) {
            case "create":
                create(common, topic, Integer.parseInt(args[3]), Short.parseShort(args[4]));
                break;
            case "produce":
                KafkaCheck.produce(common, topic, Integer.parseInt(args[3]), Integer.parseInt(args[4]), STEP_TIMEOUT_S);
                break;
            case "consume":
                System.exit(consume(common, topic, Integer.parseInt(args[3])) ? 0 : 1);
                break;
            default:
                System.out.println("unknown step " + step);
                System.exit(2);
        }
    }

    static void create(Properties common, String topic, int partitions, short replicas) throws Exception {
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, replicas)))
                .all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        System.out.println("created " + topic);
    }

    static boolean consume(Properties common, String topic, int count) {
        Properties c = new Properties();
        c.putAll(common);
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> seen = new HashSet<>();
        int records = 0;
        long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(STEP_TIMEOUT_S))) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    int key = Integer.parseInt(r.key().substring(1));
                    if (!r.value().equals("v" + key) || key < 0 || key >= count) {
                        System.out.println("wrong record " + r.key() + "=" + r.value());
                        return false;
                    }
                    seen.add(r.key());
                    records++;
                }
            }
        }
        // Idempotence: every acknowledged record once, none twice.
        System.out.println("consumed " + seen.size() + " keys in " + records + " records");
        return seen.size() == count && records == count;
    }
}
