// A Connect sink connector that appends each record's value as a line to a file. Config: file.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.*;

public class FileSink extends SinkConnector {
    private Map<String, String> props;
    public void start(Map<String, String> props) { this.props = props; }
    public Class<? extends Task> taskClass() { return FileTask.class; }
    public List<Map<String, String>> taskConfigs(int max) { return List.of(props); }
    public void stop() {}
    public ConfigDef config() {
        return new ConfigDef().define("file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "file");
    }
    public String version() { return "1"; }

    public static class FileTask extends SinkTask {
        private Writer out;
        public String version() { return "1"; }
        public void start(Map<String, String> props) {
            try {
                out = new OutputStreamWriter(new FileOutputStream(props.get("file"), true), StandardCharsets.UTF_8);
            } catch (IOException e) { throw new RuntimeException(e); }
        }
        public void put(Collection<SinkRecord> records) {
            try {
                for (SinkRecord r : records) out.write(r.kafkaPartition() + "@" + r.kafkaOffset() + " " + r.value() + "\n");
                out.flush();
            } catch (IOException e) { throw new RuntimeException(e); }
        }
        public void stop() { try { out.close(); } catch (IOException e) { } }
    }
}
