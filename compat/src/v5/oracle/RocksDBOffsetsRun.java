package oracle;

import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.common.config.ConfigRocksDBStorage;

/**
 * Consumer offsets in RocksDB as RocksDBConsumerOffsetManager#persist writes them (broker module,
 * not on the oracle's classpath): the release's own ConfigRocksDBStorage (rocketmq-common: the
 * database's options and column families), key topic@group, value the offset table serialised as
 * RocksDBOffsetSerializeWrapper is (fastjson BrowserCompatible on 5.3.3, fastjson2 on 5.4+):
 *
 *   oracle.RocksDBOffsetsRun DB_DIR topic@group=queueId:offset,queueId:offset ...
 *
 * Prints what it wrote.
 */
public final class RocksDBOffsetsRun {
    private RocksDBOffsetsRun() {
    }

    /** RocksDBOffsetSerializeWrapper's one field. */
    public static final class Wrapper {
        private ConcurrentMap<Integer, Long> offsetTable = new ConcurrentHashMap<>(16);

        public ConcurrentMap<Integer, Long> getOffsetTable() {
            return offsetTable;
        }

        public void setOffsetTable(ConcurrentMap<Integer, Long> offsetTable) {
            this.offsetTable = offsetTable;
        }
    }

    public static void main(String[] args) {
        Json.claimStdout();
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }

    static void run(String[] args) throws Exception {
        String path = args[0];
        ConfigRocksDBStorage db;
        Method put;
        boolean perFamily;
        try {        // 5.4+: RocksDBConfigManager#init
            db = (ConfigRocksDBStorage) ConfigRocksDBStorage.class.getMethod("getStore", String.class, boolean.class)
                .invoke(null, path, false);
            put = ConfigRocksDBStorage.class.getMethod("put", String.class, byte[].class, int.class, byte[].class);
            perFamily = true;
        } catch (NoSuchMethodException e) {     // 5.3.3: new ConfigRocksDBStorage(filePath, ...)
            db = ConfigRocksDBStorage.class.getConstructor(String.class).newInstance(path);
            put = ConfigRocksDBStorage.class.getMethod("put", byte[].class, int.class, byte[].class);
            perFamily = false;
        }
        if (!db.start()) {
            throw new IllegalStateException("ConfigRocksDBStorage did not start on " + path);
        }
        Map<String, Object> wrote = new LinkedHashMap<>();
        for (int i = 1; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            Wrapper w = new Wrapper();
            for (String qo : kv[1].split(",")) {
                String[] p = qo.split(":");
                w.getOffsetTable().put(Integer.parseInt(p[0]), Long.parseLong(p[1]));
            }
            byte[] key = kv[0].getBytes(StandardCharsets.UTF_8);
            byte[] value = serialise(w);
            if (perFamily) {
                put.invoke(db, "default", key, key.length, value);
            } else {
                put.invoke(db, key, key.length, value);
            }
            wrote.put(kv[0], new String(value, StandardCharsets.UTF_8));
        }
        db.shutdown();
        Json.emit(wrote);
        System.exit(0);
    }

    /** RocksDBConsumerOffsetManager#putWriteBatch's JSON.toJSONBytes(wrapper, BrowserCompatible). */
    static byte[] serialise(Wrapper w) throws Exception {
        boolean v54 = true;
        try {
            ConfigRocksDBStorage.class.getMethod("getStore", String.class, boolean.class);
        } catch (NoSuchMethodException e) {
            v54 = false;
        }
        Class<?> json = Class.forName(v54 ? "com.alibaba.fastjson2.JSON" : "com.alibaba.fastjson.JSON");
        Class<?> feature = Class.forName(v54 ? "com.alibaba.fastjson2.JSONWriter$Feature"
            : "com.alibaba.fastjson.serializer.SerializerFeature");
        Object features = java.lang.reflect.Array.newInstance(feature, 1);
        java.lang.reflect.Array.set(features, 0, feature.getField("BrowserCompatible").get(null));
        return (byte[]) json.getMethod("toJSONBytes", Object.class, features.getClass()).invoke(null, w, features);
    }
}
