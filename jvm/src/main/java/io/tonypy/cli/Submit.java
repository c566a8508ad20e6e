package io.tonypy.cli;

import io.tonypy.bridge.Streams;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.nio.file.attribute.UserPrincipal;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.zip.ZipEntry;
import java.util.zip.ZipInputStream;

/**
 * The jar's driver: `hadoop jar tony-py.jar …`, `java -cp … io.tonypy.cli.Submit …` and
 * Dataproc's `jobs submit hadoop --class …` all land here (com.linkedin.tony.cli.ClusterSubmitter
 * is the same, under TonY's name). It runs the Python client bundled in the jar
 * (tony_py_runtime.zip) in a child process, with this JVM's classpath and HADOOP_CONF_DIR, so
 * `hadoop`'s configuration, Kerberos ticket cache and file systems are the ones it uses, and
 * exits with the client's exit code (0 succeeded, 1 failed, 2 bad input, 130 interrupted).
 *
 * <p>Why a child process rather than Python attaching to this JVM: the child is the same client
 * as `tony submit` (one code path, its tested Ctrl-C handling), and it outlives a SIGKILLed
 * driver just long enough to kill the YARN application (PR_SET_PDEATHSIG). See
 * docs/architecture.md.
 */
public final class Submit {
  static final String RUNTIME = "/tony_py_runtime.zip";
  static final String RUNTIME_HASH = "/tony_py_runtime.sha256";
  static final List<String> KNOWN_CLASSES =
      Arrays.asList("io.tonypy.cli.Submit", "com.linkedin.tony.cli.ClusterSubmitter", "com.linkedin.tony.TonyClient");
  static final String NOTEBOOK_CLASS = "com.linkedin.tony.cli.NotebookSubmitter";
  static final String SUBMIT_MODULE = "tony_py.submit";
  static final String NOTEBOOK_MODULE = "tony_py.client.notebook";
  static final String[] PYTHONS = {"/opt/conda/default/bin/python3", "python3"};
  static final String CLIENT_PYTHON = "tony.client.python";
  /** A class the shaded jar carries and Maven's original-*.jar (the copy before shading) does not. */
  static final String SHADED_MARKER = "py4j/GatewayServer.class";
  static final int EXIT_USAGE = 2;
  static final long CHILD_GRACE_S = 60;

  private Submit() {}

  public static void main(String[] args) {
    System.exit(run(args));
  }

  /** TonY's NotebookSubmitter (com.linkedin.tony.cli.NotebookSubmitter): `tony notebook`. */
  public static void notebookMain(String[] args) {
    System.exit(run(args, NOTEBOOK_MODULE));
  }

  static int run(String[] args) {
    return run(args, SUBMIT_MODULE);
  }

  /** {@code module}: the Python client to run (tony_py.submit, or the notebook's). */
  static int run(String[] args, String module) {
    List<String> argv = new ArrayList<>(Arrays.asList(args));
    // `hadoop jar X.jar <class> …` with a Main-Class: RunJar passes the class name on.
    if (!argv.isEmpty() && (KNOWN_CLASSES.contains(argv.get(0)) || NOTEBOOK_CLASS.equals(argv.get(0)))) {
      if (NOTEBOOK_CLASS.equals(argv.remove(0))) {
        module = NOTEBOOK_MODULE;
      }
    }
    List<String> properties = new ArrayList<>();
    List<String> flags = genericOptions(argv, properties);
    String explicitPython = clientPython(properties);
    String python;
    Path runtime;
    try {
      checkShaded(ownJar());
      python = findPython(explicitPython);
      runtime = materializeRuntime();
    } catch (UsageException e) {
      System.err.println("tony-py: error: " + e.getMessage());
      return EXIT_USAGE;
    }
    List<String> command = new ArrayList<>(Arrays.asList(python, "-m", module));
    for (String property : properties) {
      command.add("--conf");
      command.add(property);
    }
    command.addAll(flags);
    ProcessBuilder pb = new ProcessBuilder(command).inheritIO();
    Map<String, String> env = pb.environment();
    env.put("PYTHONPATH", runtime + File.pathSeparator + runtime.resolve("deps"));
    env.put("TONY_HADOOP_CLASSPATH", System.getProperty("java.class.path"));
    env.put("TONY_PY_JAR", ownJar());
    env.put("TONY_DIE_WITH_PARENT", "1"); // the client kills the application if this JVM is killed
    env.put("TONY_LAUNCHER", "jar");
    if (env.get("HADOOP_CONF_DIR") == null) {
      String confDir = confDirOnClasspath();
      if (confDir != null) {
        env.put("HADOOP_CONF_DIR", confDir);
      }
    }
    Process child;
    try {
      child = pb.start();
    } catch (IOException e) {
      System.err.println("tony-py: error: cannot start " + python + ": " + e.getMessage());
      return EXIT_USAGE;
    }
    // SIGINT/SIGTERM to this JVM: pass SIGTERM on and wait for the client to kill the
    // application and clean up (a terminal's Ctrl-C reaches the client directly as well).
    Thread hook = new Thread(() -> {
      if (child.isAlive()) {
        child.destroy();
        try {
          child.waitFor(CHILD_GRACE_S, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
    }, "tony-py-driver-shutdown");
    Runtime.getRuntime().addShutdownHook(hook);
    try {
      int code = child.waitFor();
      Runtime.getRuntime().removeShutdownHook(hook);
      return code;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return 130;
    }
  }

  /**
   * Leading generic options, as Hadoop's GenericOptionsParser takes them (`-D key=value`,
   * `-Dkey=value`, `--D key=value`): collected as properties (Dataproc passes job properties this
   * way). Returns the rest of the arguments.
   */
  static List<String> genericOptions(List<String> argv, List<String> properties) {
    int i = 0;
    while (i < argv.size()) {
      String a = argv.get(i);
      if ((a.equals("-D") || a.equals("--D")) && i + 1 < argv.size()) {
        properties.add(argv.get(i + 1));
        i += 2;
      } else if (a.startsWith("-D") && a.length() > 2 && a.contains("=")) {
        properties.add(a.substring(2));
        i += 1;
      } else {
        break;
      }
    }
    return new ArrayList<>(argv.subList(i, argv.size()));
  }

  /**
   * -Dtony.client.python=…: `hadoop jar X.jar -D…` passes it among the arguments, not as a system
   * property (taken out of them: it is not a --conf key); else the system property or
   * TONY_CLIENT_PYTHON.
   */
  static String clientPython(List<String> properties) {
    String value = takeProperty(properties, CLIENT_PYTHON);
    return value != null ? value : System.getProperty(CLIENT_PYTHON, System.getenv("TONY_CLIENT_PYTHON"));
  }

  /** Removes key=value from properties and returns the value (the last, if repeated); null if absent. */
  static String takeProperty(List<String> properties, String key) {
    String value = null;
    for (java.util.Iterator<String> it = properties.iterator(); it.hasNext();) {
      String property = it.next();
      if (property.startsWith(key + "=")) {
        value = property.substring(key.length() + 1);
        it.remove();
      }
    }
    return value;
  }

  /** The jar must be the shaded one: the client and the AM start py4j's GatewayServer from it. */
  static void checkShaded(String jar) throws UsageException {
    if (jar.isEmpty() || holdsEntry(new File(jar), SHADED_MARKER)) {
      return;
    }
    throw new UsageException(jar + " is not the complete tony-py jar: it has no py4j (Maven's original-*.jar is "
        + "the copy before shading); use tony-py-<version>.jar from the same target/ directory");
  }

  /**
   * An explicit setting (-Dtony.client.python, TONY_CLIENT_PYTHON), then Dataproc's conda
   * interpreter, then python3 on PATH; 3.11 or newer.
   */
  static String findPython(String explicit) throws UsageException {
    List<String> candidates = new ArrayList<>();
    if (explicit != null && !explicit.isEmpty()) {
      candidates.add(explicit);
    } else {
      candidates.addAll(Arrays.asList(PYTHONS));
    }
    String found = null;
    for (String candidate : candidates) {
      String version = pythonVersion(candidate);
      if (version == null) {
        continue;
      }
      String[] parts = version.trim().split("\\.");
      int major = Integer.parseInt(parts[0]);
      int minor = Integer.parseInt(parts[1]);
      if (major > 3 || (major == 3 && minor >= 11)) {
        return candidate;
      }
      found = candidate + " is Python " + version.trim();
      if (explicit != null && !explicit.isEmpty()) {
        break;
      }
    }
    String how = "point at one with -Dtony.client.python=/path/to/python3 or TONY_CLIENT_PYTHON";
    if (found != null) {
      throw new UsageException(found + "; TonY-py's client needs Python 3.11 or newer: " + how);
    }
    throw new UsageException("no Python found (tried " + String.join(", ", candidates)
        + "); TonY-py's client needs Python 3.11 or newer: " + how);
  }

  static String pythonVersion(String python) {
    try {
      Process p = new ProcessBuilder(python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
          .redirectErrorStream(true).start();
      String out;
      try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
        out = r.readLine();
      }
      if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0 || out == null || !out.matches("\\d+\\.\\d+")) {
        return null;
      }
      return out;
    } catch (IOException | InterruptedException e) {
      return null;
    }
  }

  /**
   * The bundled Python runtime, unpacked once per content hash into the user's cache
   * (~/.cache/tony-py/runtime-<hash>): a second driver start reuses it. Unpacked into a
   * temporary directory first and renamed, so a half-written copy is never used. The driver
   * runs what it finds there, so neither the cache (TONY_PY_CACHE may be a shared path) nor
   * the runtime may belong to, or be writable by, another user.
   */
  static Path materializeRuntime() throws UsageException {
    String hash;
    try (InputStream in = Submit.class.getResourceAsStream(RUNTIME_HASH)) {
      if (in == null) {
        throw new UsageException("this jar has no bundled Python runtime (" + RUNTIME + "): rebuild it with mvn package");
      }
      hash = new String(Streams.readAll(in), StandardCharsets.UTF_8).trim();
    } catch (IOException e) {
      throw new UsageException("cannot read the bundled runtime: " + e.getMessage());
    }
    String base = System.getenv("TONY_PY_CACHE");
    Path cache = base != null ? Paths.get(base) : Paths.get(System.getProperty("user.home"), ".cache", "tony-py");
    Path target = cache.resolve("runtime-" + hash.substring(0, 20));
    try {
      privateCache(cache);
      if (!Files.exists(target, LinkOption.NOFOLLOW_LINKS)) {
        unpackRuntime(cache, target);
      }
      if (!Files.isDirectory(target, LinkOption.NOFOLLOW_LINKS)) {
        throw new UsageException("the unpacked runtime " + target + " is not a directory (a link?): remove it");
      }
      checkOwn(target, "the unpacked runtime", LinkOption.NOFOLLOW_LINKS);
      return target;
    } catch (IOException e) {
      throw new UsageException("cannot unpack the bundled Python runtime into " + cache + ": " + e.getMessage());
    }
  }

  static void unpackRuntime(Path cache, Path target) throws IOException {
    Path tmp = Files.createTempDirectory(cache, ".runtime-"); // 0700
    try (ZipInputStream zip = new ZipInputStream(Submit.class.getResourceAsStream(RUNTIME))) {
      ZipEntry entry;
      while ((entry = zip.getNextEntry()) != null) {
        Path out = tmp.resolve(entry.getName()).normalize();
        if (!out.startsWith(tmp)) {
          throw new IOException("bad entry " + entry.getName());
        }
        if (entry.isDirectory()) {
          Files.createDirectories(out);
        } else {
          Files.createDirectories(out.getParent());
          Files.copy(zip, out, StandardCopyOption.REPLACE_EXISTING);
        }
      }
    }
    try {
      Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE);
    } catch (FileAlreadyExistsException | AtomicMoveNotSupportedException e) {
      deleteTree(tmp); // another driver unpacked the same runtime meanwhile
    } catch (IOException e) {
      if (!Files.isDirectory(target)) {
        throw e;
      }
      deleteTree(tmp);
    }
  }

  /** The cache root: created 0700; one of this user's made 0700; refused if not private (checkOwn). */
  static void privateCache(Path cache) throws IOException, UsageException {
    Set<PosixFilePermission> ownerOnly = PosixFilePermissions.fromString("rwx------");
    if (!Files.exists(cache)) {
      if (cache.getParent() != null) {
        Files.createDirectories(cache.getParent());
      }
      try {
        Files.createDirectory(cache, PosixFilePermissions.asFileAttribute(ownerOnly));
      } catch (FileAlreadyExistsException e) {
        // made meanwhile (another driver): checked below like any existing one
      }
    }
    checkOwn(cache, "TonY-py's cache"); // (a link to a directory of this user's is fine)
    if (!Files.getPosixFilePermissions(cache).equals(ownerOnly)) {
      Files.setPosixFilePermissions(cache, ownerOnly); // made under a umask of 022: readable by everyone
    }
  }

  /** path belongs to this user and no one else may write to it. */
  static void checkOwn(Path path, String what, LinkOption... options) throws IOException, UsageException {
    UserPrincipal owner = Files.getOwner(path, options);
    UserPrincipal me = path.getFileSystem().getUserPrincipalLookupService()
        .lookupPrincipalByName(System.getProperty("user.name"));
    if (!owner.equals(me)) {
      throw new UsageException(what + " " + path + " belongs to another user (" + owner.getName()
          + "): point TONY_PY_CACHE at a directory of your own");
    }
    Set<PosixFilePermission> perms = Files.getPosixFilePermissions(path, options);
    if (perms.contains(PosixFilePermission.GROUP_WRITE) || perms.contains(PosixFilePermission.OTHERS_WRITE)) {
      throw new UsageException(what + " " + path + " is writable by other users ("
          + PosixFilePermissions.toString(perms) + "): check what is in it, or remove it");
    }
  }

  static void deleteTree(Path root) {
    try (java.util.stream.Stream<Path> paths = Files.walk(root)) {
      paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      // best effort
    }
  }

  /**
   * This jar's path, which the client stages for the AM. Under `hadoop jar`, RunJar loads
   * classes from its unpacked copy, so the code source may be a directory: then the jar is the
   * one on the class loader's URLs that holds this class.
   */
  static String ownJar() {
    try {
      URL location = Submit.class.getProtectionDomain().getCodeSource().getLocation();
      File file = new File(location.toURI());
      if (file.isFile()) {
        return file.getAbsolutePath();
      }
      ClassLoader loader = Submit.class.getClassLoader();
      while (loader != null) {
        if (loader instanceof URLClassLoader) {
          for (URL url : ((URLClassLoader) loader).getURLs()) {
            File candidate = new File(url.toURI());
            if (candidate.isFile() && candidate.getName().endsWith(".jar") && holdsThisClass(candidate)) {
              return candidate.getAbsolutePath();
            }
          }
        }
        loader = loader.getParent();
      }
    } catch (Exception e) {
      // fall through
    }
    return "";
  }

  static boolean holdsThisClass(File jar) {
    return holdsEntry(jar, Submit.class.getName().replace('.', '/') + ".class");
  }

  static boolean holdsEntry(File jar, String name) {
    try (java.util.jar.JarFile jf = new java.util.jar.JarFile(jar)) {
      return jf.getEntry(name) != null;
    } catch (IOException e) {
      return false;
    }
  }

  /** A `java -cp "conf:…"` user may not export HADOOP_CONF_DIR: the classpath dir with core-site.xml. */
  static String confDirOnClasspath() {
    for (String entry : System.getProperty("java.class.path", "").split(File.pathSeparator)) {
      File dir = new File(entry);
      if (dir.isDirectory() && (new File(dir, "core-site.xml").isFile() || new File(dir, "yarn-site.xml").isFile())) {
        return dir.getAbsolutePath();
      }
    }
    return null;
  }

  static final class UsageException extends Exception {
    UsageException(String message) {
      super(message);
    }
  }
}
