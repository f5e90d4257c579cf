package oracle;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.common.ConfigManager;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;

/**
 * config/consumerOffset.json as the broker's ConsumerOffsetManager reads and writes it: the same
 * ConfigManager#load (the file, else its .bak) and #persist, the same RemotingSerializable form.
 */
final class ConsumerOffsets extends ConfigManager {
    final String path;
    ConcurrentMap<String, ConcurrentMap<Integer, Long>> table = new ConcurrentHashMap<>();

    ConsumerOffsets(String path) {
        this.path = path;
    }

    @Override
    public String configFilePath() {
        return path;
    }

    @Override
    public void decode(String json) {
        if (json != null) {
            Wrapper o = RemotingSerializable.fromJson(json, Wrapper.class);
            if (o != null && o.getOffsetTable() != null) {
                table = o.getOffsetTable();
            }
        }
    }

    @Override
    public String encode() {
        return encode(false);
    }

    @Override
    public String encode(boolean pretty) {
        Wrapper o = new Wrapper();
        o.setOffsetTable(table);
        return o.toJson(pretty);
    }

    /** ConsumerOffsetManager's serialized form (its offsetTable, keyed topic@group). */
    public static final class Wrapper extends RemotingSerializable {
        private ConcurrentMap<String, ConcurrentMap<Integer, Long>> offsetTable = new ConcurrentHashMap<>();

        public ConcurrentMap<String, ConcurrentMap<Integer, Long>> getOffsetTable() {
            return offsetTable;
        }

        public void setOffsetTable(ConcurrentMap<String, ConcurrentMap<Integer, Long>> offsetTable) {
            this.offsetTable = offsetTable;
        }
    }
}
