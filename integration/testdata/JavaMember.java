// JavaMember is a Java KafkaConsumer in a consumer group, for interop tests
// with kepoch group members. It prints one line per event on stdout:
//
//	assigned t-0,t-1 | revoked ... | lost ... | record <partition> <offset> <leaderEpoch> | closed
//
// and closes (committing, leaving the group) when stdin closes.
//
// usage: java -cp 'kafka/lib/*' JavaMember.java <bootstrap> <group> <topic> <classic|consumer> [assignor class]
import java.io.IOException;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;

public class JavaMember {
    static String list(Collection<TopicPartition> ps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : ps) {
            out.add(tp.topic() + "-" + tp.partition());
        }
        Collections.sort(out);
        return String.join(",", out);
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[1]);
        p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "true");
        p.put("auto.commit.interval.ms", "200");
        p.put("group.protocol", args[3]);
        if (args[3].equals("classic")) {
            p.put("partition.assignment.strategy", args[4]);
            p.put("session.timeout.ms", "10000");
            p.put("heartbeat.interval.ms", "300");
        }
        PrintStream out = System.out;
        AtomicBoolean stop = new AtomicBoolean();
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
        c.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
            public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                out.println("assigned " + list(ps));
                out.flush();
            }

            public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                out.println("revoked " + list(ps));
                out.flush();
            }

            public void onPartitionsLost(Collection<TopicPartition> ps) {
                out.println("lost " + list(ps));
                out.flush();
            }
        });
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                }
            } catch (IOException e) {
            }
            stop.set(true);
            c.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();
        while (!stop.get()) {
            try {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    out.println("record " + r.partition() + " " + r.offset() + " " + r.leaderEpoch().orElse(-1));
                }
                out.flush();
            } catch (WakeupException e) {
                break;
            }
        }
        c.close();
        out.println("closed");
        out.flush();
    }
}
