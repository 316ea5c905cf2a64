package org.apache.zookeeper;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

/**
 * zkCli.sh's one-shot mode (`zkCli.sh -server HOSTS cmd args...`) for many
 * commands in one JVM: a JVM per command cost a second of CPU each, 114 of
 * them per run of test_cli_compat.py. Each command still gets its own
 * ZooKeeperMain, built from the arguments zkCli.sh passes (and
 * -waitforconnection), run by its
 * own run() (in this package for that), its exit code taken from
 * ServiceUtils' exit hook instead of System.exit. Afterwards its connection
 * is dropped without closing the session, as a one-shot zkCli.sh's exit
 * drops it.
 *
 * stdin: one command per line, its words separated by tabs; an empty line
 * or EOF ends the batch. stdout: per command one line
 * "result EXIT BASE64(stdout) BASE64(stderr)" of what the command printed.
 * argv[0]: the server list for -server.
 */
public final class ZkCliBatch {
    /** How long a dropped client's event thread is given to finish. */
    private static final long EVENT_THREAD_JOIN_MS = 5_000;
    /** The exit code run() last asked for; -1 until it asks. */
    private static volatile int exitCode = -1;

    /** A stream whose bytes are taken once per command. */
    private static final class Capture extends ByteArrayOutputStream {
        synchronized String takeBase64() {
            String text = Base64.getEncoder().encodeToString(toByteArray());
            reset();
            return text;
        }
    }

    /** ZooKeeperMain with its package-private run() reachable. */
    private static final class OneShot extends ZooKeeperMain {
        OneShot(String[] args) throws java.io.IOException, InterruptedException {
            super(args);
        }

        void runAndDrop() throws java.io.IOException, InterruptedException {
            run();
            zk.cnxn.disconnect();
            // Its watcher's output (the connection event) before the next
            // command's starts.
            zk.cnxn.eventThread.join(EVENT_THREAD_JOIN_MS);
        }
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length != 1) {
            System.err.println("usage: ZkCliBatch HOST:PORT[,HOST:PORT...] < commands");
            System.exit(2);
        }
        PrintStream results = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
                                              "UTF-8");
        Capture out = new Capture();
        Capture err = new Capture();
        // Before ZooKeeperMain's class is initialised: its commands keep the
        // System.out and System.err of that moment.
        System.setOut(new PrintStream(out, true, "UTF-8"));
        System.setErr(new PrintStream(err, true, "UTF-8"));
        org.apache.zookeeper.util.ServiceUtils.setSystemExitProcedure(code -> exitCode = code);
        BufferedReader commands = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = commands.readLine(); line != null && !line.isEmpty(); line = commands.readLine()) {
            String[] words = line.split("\t", -1);
            // -waitforconnection (a zkCli option): the command starts once
            // the connection event is printed, so the event thread's lines
            // never land inside the command's own ("[" of `ls`, then the
            // event, then the children).
            String[] args = new String[words.length + 3];
            args[0] = "-server";
            args[1] = argv[0];
            args[2] = "-waitforconnection";
            System.arraycopy(words, 0, args, 3, words.length);
            exitCode = -1;
            try {
                new OneShot(args).runAndDrop();
            } catch (Exception e) {
                // zkCli.sh would print the stack trace and exit 1.
                e.printStackTrace();
                exitCode = 1;
            }
            System.out.flush();
            System.err.flush();
            results.println("result " + exitCode + " " + out.takeBase64() + " " + err.takeBase64());
        }
        results.flush();
        Runtime.getRuntime().halt(0);
    }
}
