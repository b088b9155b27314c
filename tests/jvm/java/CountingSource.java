// A Connect source connector that emits records "n" for n in [0, count) on one topic, keeping its
// position in Connect's offsets topic (so a restarted worker resumes instead of starting over).
// Config: topic, count.
import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.source.*;

public class CountingSource extends SourceConnector {
    private Map<String, String> props;
    public void start(Map<String, String> props) { this.props = props; }
    public Class<? extends Task> taskClass() { return CountingTask.class; }
    public List<Map<String, String>> taskConfigs(int max) { return List.of(props); }
    public void stop() {}
    public ConfigDef config() {
        return new ConfigDef().define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "topic")
            .define("count", ConfigDef.Type.LONG, ConfigDef.Importance.HIGH, "records");
    }
    public String version() { return "1"; }

    public static class CountingTask extends SourceTask {
        private String topic;
        private long next, count;
        private static final Map<String, String> PART = Map.of("source", "counter");
        public String version() { return "1"; }
        public void start(Map<String, String> props) {
            topic = props.get("topic");
            count = Long.parseLong(props.get("count"));
            Map<String, Object> at = context.offsetStorageReader().offset(PART);
            next = at == null ? 0 : ((Number) at.get("n")).longValue() + 1;
        }
        public List<SourceRecord> poll() throws InterruptedException {
            if (next >= count) { Thread.sleep(100); return null; }
            List<SourceRecord> out = new ArrayList<>();
            for (int i = 0; i < 100 && next < count; i++, next++)
                out.add(new SourceRecord(PART, Map.of("n", next), topic, null, Schema.STRING_SCHEMA, "k" + next,
                                         Schema.STRING_SCHEMA, Long.toString(next)));
            return out;
        }
        public void stop() {}
    }
}
