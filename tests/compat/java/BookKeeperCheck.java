import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.TreeSet;

import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.util.LocalBookKeeper;

/**
 * Apache BookKeeper 4.18 (the storage of Apache Pulsar) on a ZooKeeper
 * ensemble, or on Keel: BookKeeperCheck CONNECT_STRING BOOKIES ENTRIES.
 *
 * Starts BOOKIES bookies in this JVM (each registers with an ephemeral
 * node and a cookie), writes ENTRIES entries to a ledger replicated on
 * three bookies (ids from ZooKeeper, metadata a znode), prints "pause" and
 * waits for a line on stdin (the caller may fail a server meanwhile),
 * writes ENTRIES more, opens the ledger from a second client with recovery
 * (which fences the writer through a conditional metadata update), checks
 * that the writer's next write is refused and that every acknowledged
 * entry reads back, creates and deletes more ledgers, stops a bookie and
 * waits for its registration to go. One line per step; exit 1 on a wrong
 * result, or the stack trace of a step that failed. The check's own lines
 * start with "check: ".
 */
public class BookKeeperCheck {
    static final int EXTRA_LEDGERS = 4;
    static final long BOOKIE_GONE_TIMEOUT_MS = 60_000;

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int bookies = Integer.parseInt(args[1]);
        int entries = Integer.parseInt(args[2]);
        String uri = "zk+null://" + connect.replace(",", ";") + "/ledgers";
        String[] first = connect.split(",")[0].split(":");
        ServerConfiguration server = new ServerConfiguration();
        server.setMetadataServiceUri(uri);
        server.setAllowLoopback(true);
        server.setAdvertisedAddress("127.0.0.1");
        ClientConfiguration client = new ClientConfiguration();
        client.setMetadataServiceUri(uri);
        byte[] password = "keel".getBytes();
        boolean ok;
        try (LocalBookKeeper local = LocalBookKeeper.getLocalBookies(first[0], Integer.parseInt(first[1]), bookies,
                false, server)) {
            local.start();
            try (BookKeeper writer = new BookKeeper(client); BookKeeper reader = new BookKeeper(client);
                 BookKeeperAdmin admin = new BookKeeperAdmin(client)) {
                say("bookies " + admin.getAvailableBookies().size());
                ok = ledgers(writer, reader, admin, entries, password);
                local.removeBookie();
                long deadline = System.currentTimeMillis() + BOOKIE_GONE_TIMEOUT_MS;
                while (admin.getAvailableBookies().size() != bookies - 1 && System.currentTimeMillis() < deadline) {
                    Thread.sleep(100);
                }
                say("bookies after a stop " + admin.getAvailableBookies().size());
            }
        }
        System.out.flush();
        // The bookies' and clients' executor threads may linger.
        System.exit(ok ? 0 : 1);
    }

    static boolean ledgers(BookKeeper writer, BookKeeper reader, BookKeeperAdmin admin, int entries, byte[] password)
            throws Exception {
        LedgerHandle ledger = writer.createLedger(3, 3, 2, BookKeeper.DigestType.CRC32, password);
        write(ledger, 0, entries);
        say("written ledger " + ledger.getId() + " last " + ledger.getLastAddConfirmed());
        say("pause");
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        write(ledger, entries, entries);
        say("written again last " + ledger.getLastAddConfirmed());
        LedgerHandle recovered = reader.openLedger(ledger.getId(), BookKeeper.DigestType.CRC32, password);
        say("recovered last " + recovered.getLastAddConfirmed() + " closed " + recovered.isClosed());
        try {
            ledger.addEntry("late".getBytes());
            say("a fenced writer's write was accepted");
            return false;
        } catch (BKException.BKLedgerFencedException expected) {
            say("fenced writer refused");
        }
        int read = 0;
        Enumeration<LedgerEntry> found = recovered.readEntries(0, recovered.getLastAddConfirmed());
        while (found.hasMoreElements()) {
            LedgerEntry entry = found.nextElement();
            if (!new String(entry.getEntry()).equals("entry-" + entry.getEntryId())) {
                say("wrong entry " + entry.getEntryId());
                return false;
            }
            read++;
        }
        say("read " + read);
        recovered.close();
        List<Long> made = new ArrayList<>();
        for (int i = 0; i < EXTRA_LEDGERS; i++) {
            LedgerHandle more = writer.createLedger(3, 2, 2, BookKeeper.DigestType.CRC32, password);
            write(more, 0, 10);
            more.close();
            made.add(more.getId());
        }
        writer.deleteLedger(made.get(0));
        writer.deleteLedger(made.get(2));
        TreeSet<Long> listed = new TreeSet<>();
        for (Long id : admin.listLedgers()) {
            listed.add(id);
        }
        say("ledgers " + listed);
        return read == 2 * entries;
    }

    /** One line of the check's own (the bookies log to stdout too). */
    static void say(String line) {
        System.out.println("check: " + line);
        System.out.flush();
    }

    static void write(LedgerHandle ledger, int from, int count) throws Exception {
        for (int i = from; i < from + count; i++) {
            ledger.addEntry(("entry-" + i).getBytes());
        }
    }
}
