package oracle;

import java.nio.ByteBuffer;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/** What differs between the 4.x and 5.x store APIs: the 4.x side. */
final class Compat {
    private Compat() {
    }

    static DefaultMessageStore newStore(MessageStoreConfig msc, BrokerStatsManager stats, BrokerConfig bc)
        throws Exception {
        return new DefaultMessageStore(msc, stats, null, bc);
    }

    /**
     * 4.x's start() starts the store's own ScheduleMessageService: stopped at once (as a slave's
     * broker would), so that no due delayed message is re-delivered into the store under test.
     */
    static void afterStart(DefaultMessageStore store) {
        store.handleScheduleMessageService(BrokerRole.SLAVE);
    }

    static MessageExt newMessage() {
        return new MessageExtBrokerInner();
    }

    /** The fields the broker's SendMessageProcessor fills in from the properties. */
    static void seal(MessageExt m) {
        MessageExtBrokerInner inner = (MessageExtBrokerInner) m;
        String tags = m.getProperty(MessageConst.PROPERTY_TAGS);
        inner.setTagsCode(tags == null ? 0 : MessageExtBrokerInner.tagsString2tagsCode(tags));
        inner.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
    }

    static PutMessageResult put(DefaultMessageStore store, MessageExt m) {
        return store.putMessage((MessageExtBrokerInner) m);
    }

    /** A delay level: 4.x's CommitLog#putMessage moves the message to SCHEDULE_TOPIC_XXXX itself. */
    static void delay(DefaultMessageStore store, MessageExt m, int level) {
        m.setDelayTimeLevel(level);
    }

    /** The consume queue unit at offset: {phy, size, tagsCode}, null when there is none. */
    static long[] unit(DefaultMessageStore store, String topic, int queueId, long offset) {
        ConsumeQueue cq = store.getConsumeQueue(topic, queueId);
        SelectMappedBufferResult r = cq == null ? null : cq.getIndexBuffer(offset);
        if (r == null) {
            return null;
        }
        try {
            ByteBuffer bb = r.getByteBuffer();
            return new long[] {bb.getLong(), bb.getInt(), bb.getLong()};
        } finally {
            r.release();
        }
    }
}
