package io.tonypy.am;

import java.io.File;
import java.io.IOException;
import java.security.PrivilegedExceptionAction;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.security.token.delegation.AbstractDelegationTokenIdentifier;

/**
 * Jobs longer than their delegation tokens, with the submitter's keytab (localized to the AM's
 * container only): the AM logs in from it before anything touches HDFS, and gets new sets of
 * HDFS tokens, for itself and for every container it starts later. YARN cannot refresh a running
 * container's token file itself (YARN-11954), and a new AM attempt starts with the submission's
 * tokens, so each attempt logs in again here.
 *
 * <p>This class is the mechanism only: the login, the renewal interval (probed from the NameNode),
 * the dates of the tokens in hand, and a new set on demand. When a set is due is decided by the
 * Python AM from those dates (tony_py/am/tokens.py, next_set_in_s), which then asks for it here
 * and hands the set to the running executors: a set is due half-way from now to the moment the
 * first token of the set in hand may die, its issue date plus the renewal interval (never past its
 * max date). No renewal of a token is counted on: the RM stops renewing the submitted ones before
 * their max date (YARN-2704, once less than valid-time-remaining is left) and nobody renews the
 * sets asked for here. So an AM that starts late, its submitted tokens already old, gets a set at
 * once, not some time after its own start.
 */
final class TokenRenewal {
  static final String KEYTAB_FILE = "tony.keytab";
  static final String PRINCIPAL_ENV = "TONY_KEYTAB_PRINCIPAL";
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
  /** The services of the last set asked for here (empty before): the tokens it replaced. */
  private volatile Set<Text> renewedServices = new HashSet<>();
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
   * The Kerberos-only identity for asking. A later attempt may have been started with tokens
   * past their max lifetime, and its login user would still present them to HDFS (a token is
   * preferred to Kerberos): with renewFirst a new set replaces them before this returns, ahead
   * of anything that touches HDFS (a few tries).
   */
  void start(boolean renewFirst) throws IOException, InterruptedException {
    kerberos =
        UserGroupInformation.loginUserFromKeytabAndReturnUGI(
            keytabPrincipal(), new File(KEYTAB_FILE).getAbsolutePath());
    if (renewFirst) {
      for (int tries = 1; !renewNow(); tries++) {
        if (tries == FIRST_SET_TRIES) {
          throw new IOException("could not get new delegation tokens with the submitter's keytab: " + lastError);
        }
        Thread.sleep(FIRST_SET_RETRY_MS);
      }
    }
  }

  int version() {
    return version.get();
  }

  String lastError() {
    return lastError;
  }

  /** The NameNode's configured renewal interval as this process's configuration says it (a day by default). */
  long configuredIntervalMs() {
    return Math.max(1_000, conf.getLong(RENEW_INTERVAL_KEY, DEFAULT_RENEW_INTERVAL_MS));
  }

  /**
   * The NameNode's renewal interval, as Spark learns it: a token whose renewer is this
   * principal, renewed once (the new expiry less its issue date), then cancelled. Where that
   * fails, the configured one: renewal must not stop for want of a probe.
   */
  long probeIntervalMs() {
    try {
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
    } catch (Exception e) {
      lastError = String.valueOf(e);
      long configured = configuredIntervalMs();
      ApplicationMaster.log("could not learn the delegation tokens' renewal interval (" + e + "); assuming "
          + RENEW_INTERVAL_KEY + " = " + configured / 1000 + " s");
      return configured;
    }
  }

  /**
   * The dates of the tokens a new set replaces, as this process holds them now: those of the
   * file systems' services (the submission's, before the first set here) and of the last set's.
   * [{"kind", "service", "issued_ms", "max_ms"}], the NameNode's clock.
   */
  List<Map<String, Object>> heldTokens() throws IOException, InterruptedException {
    Set<Text> services = new HashSet<>(renewedServices);
    kerberos.doAs(
        (PrivilegedExceptionAction<Void>)
            () -> {
              addService(services, null);
              for (String uri : fileSystems) {
                addService(services, uri);
              }
              return null;
            });
    Credentials held = UserGroupInformation.getLoginUser().getCredentials();
    List<Map<String, Object>> dates = new ArrayList<>();
    for (Text service : services) {
      Token<?> token = held.getToken(service);
      Object id = token == null ? null : token.decodeIdentifier();
      if (id instanceof AbstractDelegationTokenIdentifier) {
        AbstractDelegationTokenIdentifier dt = (AbstractDelegationTokenIdentifier) id;
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("kind", token.getKind().toString());
        entry.put("service", service.toString());
        entry.put("issued_ms", dt.getIssueDate());
        entry.put("max_ms", dt.getMaxDate());
        dates.add(entry);
      }
    }
    return dates;
  }

  /** The token service of a file system (uri; null: the default one), if it has one and can be made. */
  private void addService(Set<Text> services, String uri) {
    try {
      FileSystem fs = uri == null ? FileSystem.get(conf) : new Path(uri).getFileSystem(conf);
      String service = fs.getCanonicalServiceName();
      if (service != null) {
        services.add(new Text(service));
      }
    } catch (IOException | RuntimeException e) {
      ApplicationMaster.log("the token service of " + (uri == null ? "the default file system" : uri)
          + " is not known (" + e + "): its token does not count in when the next set is due");
    }
  }

  /** A new set of HDFS tokens in this process's credentials; whether it is (else lastError says why). */
  synchronized boolean renewNow() {
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
      io.tonypy.bridge.TokenAliases.addHostAliases(fresh, conf, fileSystems);  // for tasks' hdfs-native
      // Same services: the new tokens replace the old ones, for this process and for containers.
      UserGroupInformation.getLoginUser().addCredentials(fresh);
      Set<Text> services = new HashSet<>();
      for (Token<?> token : fresh.getAllTokens()) {
        services.add(token.getService());
      }
      renewedServices = services;
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
}
