// What ClientScenarios and ShareScenarios share: each spec "tag;scenario;arg;arg..." runs on a thread of its
// own with its tag in TAG, and ends in a "done" line with its seconds or an "error" line with its trace.
final class ScenarioThreads {
    interface Runner {
        void run(String scenario, String[] args) throws Exception;
    }

    interface Emitter {
        void emit(Object... kv);
    }

    static Thread of(String[] spec, String namePrefix, ThreadLocal<String> tag, Runner runner, Emitter emitter) {
        return new Thread(() -> {
            tag.set(spec[0]);
            long start = System.nanoTime();
            try {
                runner.run(spec[1], java.util.Arrays.copyOfRange(spec, 2, spec.length));
                emitter.emit("done", true, "seconds", (System.nanoTime() - start) / 1e9);
            } catch (Throwable e) {  // one scenario failing is that test's failure, not the others'
                java.io.StringWriter trace = new java.io.StringWriter();
                e.printStackTrace(new java.io.PrintWriter(trace));
                emitter.emit("error", trace.toString());
            }
        }, namePrefix + spec[0]);
    }

    // The specs args[1..], each on its thread, joined before it returns; a spec whose scenario is one of
    // `inline` runs to its end on the caller's thread before the next spec starts.
    static void runAll(String[] args, String namePrefix, ThreadLocal<String> tag, Runner runner, Emitter emitter,
                       java.util.Set<String> inline) throws InterruptedException {
        java.util.List<Thread> threads = new java.util.ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            String[] spec = args[i].split(";", -1);
            Thread t = of(spec, namePrefix, tag, runner, emitter);
            if (inline.contains(spec[1])) {
                t.run();
            } else {
                t.start();
                threads.add(t);
            }
        }
        for (Thread t : threads) t.join();
    }
}
