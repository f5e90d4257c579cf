package oracle;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Field;
import java.util.Properties;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MappedFileQueue;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/** The real DefaultMessageStore on a store directory, configured as BrokerStartup configures it. */
final class Stores {
    final MessageStoreConfig config = new MessageStoreConfig();
    final BrokerConfig brokerConfig = new BrokerConfig();
    final DefaultMessageStore store;

    /** Every key of broker.conf applied with MixAll.properties2Object (BrokerStartup's way); the paths are the store's. */
    Stores(File root, File brokerConf) throws Exception {
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(brokerConf)) {
            props.load(in);
        }
        config.setHaListenPort(0);    // HA is not used; the default port may be taken
        MixAll.properties2Object(props, brokerConfig);
        MixAll.properties2Object(props, config);
        config.setStorePathRootDir(root.getPath());
        config.setStorePathCommitLog(root.getPath() + File.separator + "commitlog");
        BrokerStatsManager stats = new BrokerStatsManager(brokerConfig.getBrokerClusterName(),
            brokerConfig.isEnableDetailStat());
        store = Compat.newStore(config, stats, brokerConfig);
    }

    /** Where the commitlog's flush has reached (MappedFileQueue#flushedWhere; not public on 4.x's CommitLog). */
    long flushedWhere() throws IOException {
        try {
            Field f = CommitLog.class.getDeclaredField("mappedFileQueue");
            f.setAccessible(true);
            return ((MappedFileQueue) f.get(store.getCommitLog())).getFlushedWhere();
        } catch (ReflectiveOperationException e) {
            throw new IOException(e);
        }
    }
}
