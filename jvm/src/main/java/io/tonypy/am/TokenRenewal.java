package io.tonypy.am;

import java.io.File;
import java.io.IOException;
import java.security.PrivilegedExceptionAction;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.security.token.delegation.AbstractDelegationTokenIdentifier;

/**
 * Jobs longer than their delegation tokens, with the submitter's keytab (localized to the AM's
 * container only): the AM logs in from it before anything touches HDFS, and from then on gets a
 * new set of HDFS tokens at 75 % of their renewal interval (as Spark and Flink do), for itself
 * and for every container it starts later. Python learns of each new set by its version and
 * hands it to the running executors (tony_py/am/tokens.py). YARN cannot refresh a running
 * container's token file itself (YARN-11954), and a new AM attempt starts with the submission's
 * tokens, so each attempt logs in again here.
 */
final class TokenRenewal {
  static final String KEYTAB_FILE = "tony.keytab";
  static final String PRINCIPAL_ENV = "TONY_KEYTAB_PRINCIPAL";
  static final double RENEW_AT = 0.75;
  private static final long MIN_DELAY_MS = 5_000;
  /** The probe waits out the job's start (tasks launching on the same cores); renewal is days away. */
  static final long PROBE_AFTER_MS = 10_000;
  /** A later attempt's first set: tries, and the wait between them (a NameNode failing over). */
  private static final int FIRST_SET_TRIES = 3;
  private static final long FIRST_SET_RETRY_MS = 5_000;
  /** Where the probe fails: the NameNode's configured interval (HDFS's default, a day). */
  private static final String RENEW_INTERVAL_KEY = "dfs.namenode.delegation.token.renew-interval";
  private static final long DEFAULT_RENEW_INTERVAL_MS = 86_400_000L;

  private final Configuration conf;
  private final List<String> fileSystems;
  private final Runnable onNewTokens;
  private final AtomicInteger version = new AtomicInteger();
  private final ScheduledExecutorService timer =
      Executors.newSingleThreadScheduledExecutor(
          r -> {
            Thread t = new Thread(r, "tony-token-renewal");
            t.setDaemon(true);
            return t;
          });
  private volatile long intervalMs;
  /** When this process last got a set (System.nanoTime), 0 before: the next one is due from then. */
  private volatile long obtainedAtNs;
  private ScheduledFuture<?> next;
  /**
   * Kerberos alone, for asking for tokens: a NameNode issues none to a caller that
   * authenticates with a token, which is what the login user (holding the container's tokens)
   * does. Spark keeps the same two identities.
   */
  private UserGroupInformation kerberos;
  private volatile String lastError;

  TokenRenewal(Configuration conf, List<String> fileSystems, Runnable onNewTokens) {
    this.conf = conf;
    this.fileSystems = fileSystems;
    this.onNewTokens = onNewTokens;
  }

  /** The keytab's principal when this container holds the submitter's keytab, else null. */
  static String keytabPrincipal() {
    String principal = System.getenv(PRINCIPAL_ENV);
    boolean present = principal != null && !principal.isEmpty() && new File(KEYTAB_FILE).isFile();
    return present && UserGroupInformation.isSecurityEnabled() ? principal : null;
  }

  /**
   * Before anything touches HDFS or the RM: log in from the keytab, keeping the container's own
   * tokens (the AMRM token among them). Returns whether it did.
   */
  static boolean loginFromKeytab() throws IOException {
    String principal = keytabPrincipal();
    if (principal == null) {
      return false;
    }
    Credentials container = UserGroupInformation.getCurrentUser().getCredentials();
    UserGroupInformation.loginUserFromKeytab(principal, new File(KEYTAB_FILE).getAbsolutePath());
    UserGroupInformation.getLoginUser().addCredentials(container);
    ApplicationMaster.log("logged in from the submitter's keytab as " + principal);
    return true;
  }

  /**
   * Learn the tokens' renewal interval, then renew on a timer, all on the renewal thread and
   * PROBE_AFTER_MS after the start: the first attempt's tokens are fresh (the RM renews them up
   * to their max lifetime), so nothing here delays the AM's registration (it cost 1.1 s there)
   * or competes with the tasks' start. A later attempt may have been
   * started with tokens past that lifetime, and its login user would still present them to HDFS
   * (a token is preferred to Kerberos): with renewFirst a new set replaces them before this
   * returns, ahead of anything that touches HDFS (a few tries), and its probe runs at once: the
   * RM does not renew the set this process asked for, so the next one is due 75 % of the
   * interval after it.
   */
  void start(boolean renewFirst) throws IOException, InterruptedException {
    kerberos =
        UserGroupInformation.loginUserFromKeytabAndReturnUGI(
            keytabPrincipal(), new File(KEYTAB_FILE).getAbsolutePath());
    if (renewFirst) {
      for (int tries = 1; !obtain(); tries++) {
        if (tries == FIRST_SET_TRIES) {
          throw new IOException("could not get new delegation tokens with the submitter's keytab: " + lastError);
        }
        Thread.sleep(FIRST_SET_RETRY_MS);
      }
    }
    timer.schedule(this::learnIntervalAndSchedule, renewFirst ? 0 : PROBE_AFTER_MS, TimeUnit.MILLISECONDS);
  }

  private void learnIntervalAndSchedule() {
    try {
      intervalMs = renewalInterval();
    } catch (Exception e) {
      // Renewal must not stop for want of a probe: the configured interval is what the
      // NameNode uses unless its own configuration differs.
      lastError = String.valueOf(e);
      intervalMs = conf.getLong(RENEW_INTERVAL_KEY, DEFAULT_RENEW_INTERVAL_MS);
      ApplicationMaster.log("could not learn the delegation tokens' renewal interval (" + e + "); assuming "
          + RENEW_INTERVAL_KEY + " = " + intervalMs / 1000 + " s");
    }
    long sinceLastSet = obtainedAtNs == 0 ? 0 : (System.nanoTime() - obtainedAtNs) / 1_000_000;
    schedule(Math.max(MIN_DELAY_MS, delay() - sinceLastSet));
    ApplicationMaster.log(
        "delegation tokens: renewal interval " + intervalMs / 1000 + " s, new tokens every "
            + delay() / 1000 + " s");
  }

  int version() {
    return version.get();
  }

  String lastError() {
    return lastError;
  }

  long delay() {
    // intervalMs is 0 until learnt: a renewal asked for before then (tests) sets the next one
    // MIN_DELAY_MS later, until learnIntervalAndSchedule replaces it
    return Math.max(MIN_DELAY_MS, (long) (intervalMs * RENEW_AT));
  }

  /** One pending renewal at a time: a renewal asked for early (renewTokensNow) replaces it. */
  private synchronized void schedule(long delayMs) {
    if (next != null) {
      next.cancel(false);
    }
    next = timer.schedule(this::renewNow, delayMs, TimeUnit.MILLISECONDS);
  }

  /** A new set of HDFS tokens in this process's credentials; a failure is retried sooner. */
  synchronized void renewNow() {
    if (obtain()) {
      schedule(delay());
    } else {
      ApplicationMaster.log("trying again in 10 s");
      schedule(Math.min(10_000, delay()));
    }
  }

  /** Whether a new set is in place (else lastError says why). */
  private boolean obtain() {
    try {
      kerberos.checkTGTAndReloginFromKeytab();
      Credentials fresh = new Credentials();
      String renewer = io.tonypy.bridge.Renewer.rmPrincipal(conf);
      kerberos.doAs(
          (PrivilegedExceptionAction<Void>)
              () -> {
                FileSystem.get(conf).addDelegationTokens(renewer, fresh);
                for (String uri : fileSystems) {
                  new Path(uri).getFileSystem(conf).addDelegationTokens(renewer, fresh);
                }
                return null;
              });
      // Same services: the new tokens replace the old ones, for this process and for containers.
      UserGroupInformation.getLoginUser().addCredentials(fresh);
      obtainedAtNs = System.nanoTime();
      lastError = null;
      int v = version.incrementAndGet();
      onNewTokens.run();
      ApplicationMaster.log("delegation tokens renewed (set " + v + ", " + fresh.numberOfTokens() + " tokens)");
      return true;
    } catch (Exception e) {
      lastError = String.valueOf(e);
      ApplicationMaster.log("could not get new delegation tokens: " + e);
      return false;
    }
  }

  /**
   * The NameNode's renewal interval, as Spark learns it: a token whose renewer is this
   * principal, renewed once (the new expiry less its issue date), then cancelled.
   */
  private long renewalInterval() throws IOException, InterruptedException {
    UserGroupInformation ugi = kerberos;
    return ugi.doAs(
        (PrivilegedExceptionAction<Long>)
            () -> {
              Credentials probe = new Credentials();
              Token<?>[] tokens = FileSystem.get(conf).addDelegationTokens(ugi.getUserName(), probe);
              if (tokens == null || tokens.length == 0) {
                throw new IOException("the default file system issued no delegation token");
              }
              Token<?> token = tokens[0];
              long expiry = token.renew(conf);
              long issued = ((AbstractDelegationTokenIdentifier) token.decodeIdentifier()).getIssueDate();
              token.cancel(conf);
              return Math.max(1_000, expiry - issued);
            });
  }

  void stop() {
    timer.shutdownNow();
  }
}
