package oracle;

import java.io.File;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;

import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.dledger.DLedgerCommitLog;

/**
 * A DLedger store written by the real broker store (broker.conf enableDLegerCommitLog=true with
 * dLegerGroup, dLegerPeers, dLegerSelfId: DefaultMessageStore builds DLedgerCommitLog and a
 * single-member DLedgerServer on STORE_DIR/dledger-SELFID/):
 *
 *   oracle.DLedgerWrite STORE_DIR BROKER_CONF N SEED
 *
 * load(), start(), wait until the member is the leader, N puts (ModeStores#put), then
 * Runtime.halt as a kill -9. Prints (Json) the acked puts and the store's max phy offset.
 */
public final class DLedgerWrite {
    private DLedgerWrite() {
    }

    public static void main(String[] args) {
        Json.claimStdout();
        try {
            File root = new File(args[0]).getAbsoluteFile();
            int n = Integer.parseInt(args[2]);
            Random rnd = new Random(Long.parseLong(args[3]));
            Stores s = new Stores(root, new File(args[1]));
            DefaultMessageStore store = s.store;
            if (!store.load()) {
                throw new IllegalStateException("load() failed on " + root);
            }
            store.start();
            DLedgerCommitLog log = (DLedgerCommitLog) store.getCommitLog();
            long deadline = System.currentTimeMillis() + 60_000L;
            while (!log.getdLedgerServer().getMemberState().isLeader()) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("no DLedger leadership in 60 s");
                }
                Thread.sleep(10);
            }
            Map<String, Object> j = new LinkedHashMap<>();
            j.put("written", ModeStores.put(store, rnd, 0, n));
            j.put("maxPhyOffset", store.getMaxPhyOffset());
            Json.emit(j);
            Runtime.getRuntime().halt(0);
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }
}
