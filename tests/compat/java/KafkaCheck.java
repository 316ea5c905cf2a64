import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Drives a Kafka broker whose metadata lives in ZooKeeper (or Keel):
 * KafkaCheck BOOTSTRAP TOPIC COUNT. Creates TOPIC (3 partitions), sets a
 * topic config, creates and deletes TOPIC-doomed (the controller's delete
 * path), produces COUNT records with acks=all and idempotence, and reads
 * them back in a consumer group that commits its offsets. Prints one line
 * per step; exits 1 if a record is missing or wrong, or with the stack
 * trace of a step that failed or timed out.
 */
public class KafkaCheck {
    static final long STEP_TIMEOUT_S = 60;
    static final long CONSUME_TIMEOUT_MS = 90_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        administer(common, topic);
        produce(common, topic, 0, count, STEP_TIMEOUT_S);
        int seen = consume(common, topic, count);
        System.out.println("consumed " + seen);
        System.exit(seen == count ? 0 : 1);
    }

    static void administer(Properties common, String topic) throws Exception {
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            AlterConfigOp retention = new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(retention))).all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
            String doomed = topic + "-doomed";
            admin.createTopics(List.of(new NewTopic(doomed, 1, (short) 1))).all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
            admin.deleteTopics(List.of(doomed)).all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS);
            Set<String> names = new TreeSet<>(admin.listTopics().names().get(STEP_TIMEOUT_S, TimeUnit.SECONDS));
            System.out.println("topics " + names);
            String retained = admin.describeConfigs(List.of(resource)).all().get(STEP_TIMEOUT_S, TimeUnit.SECONDS)
                .get(resource).get("retention.ms").value();
            System.out.println("retention.ms " + retained);
        }
    }

    /** Keys kFROM..k(FROM+COUNT-1), each acknowledged (acks=all, idempotent)
     * within stepTimeoutS before the next is sent (KafkaFailover's too). */
    static void produce(Properties common, String topic, int from, int count, long stepTimeoutS) throws Exception {
        Properties p = new Properties();
        p.putAll(common);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = from; i < from + count; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get(stepTimeoutS, TimeUnit.SECONDS);
            }
        }
        System.out.println("produced " + count);
    }

    static int consume(Properties common, String topic, int count) {
        Properties c = new Properties();
        c.putAll(common);
        c.put("group.id", topic + "-group");
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    if (!r.value().equals("v" + r.key().substring(1))) {
                        System.out.println("wrong record " + r.key() + "=" + r.value());
                        System.exit(1);
                    }
                    seen.add(r.key());
                }
            }
            consumer.commitSync();
        }
        return seen.size();
    }
}
