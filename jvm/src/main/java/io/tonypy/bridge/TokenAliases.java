package io.tonypy.bridge;

import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.net.NetUtils;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.SecurityUtil;
import org.apache.hadoop.security.token.Token;

/**
 * A second copy of each non-HA HDFS delegation token under the NameNode's address as a URL
 * names it (host:port), beside Hadoop's own (IP:port, hadoop.security.token.service.use_ip's
 * default). Task code that reads HDFS without a JVM (hdfs-native, tony_py/hdfs.py) picks a token
 * by the literal address of the URL it opens, so without the copy a task holding a valid token
 * was refused (TonY's issues #284/#292 were the same mismatch). A nameservice's token
 * (ha-hdfs:ns) needs none. Java clients ignore the copy: they look a token up by IP:port.
 */
public final class TokenAliases {
  private static final Text HDFS_TOKEN = new Text("HDFS_DELEGATION_TOKEN");
  private static final int NAMENODE_DEFAULT_PORT = 8020;

  private TokenAliases() {}

  /** Adds the copies to creds for the default file system and each of fileSystems; returns their names. */
  public static List<String> addHostAliases(Credentials creds, Configuration conf, List<String> fileSystems) {
    Set<URI> uris = new LinkedHashSet<>();
    uris.add(FileSystem.getDefaultUri(conf));
    for (String fs : fileSystems) {
      uris.add(URI.create(fs));
    }
    List<String> added = new ArrayList<>();
    for (URI uri : uris) {
      String alias = hostAlias(uri, conf);
      if (alias == null) {
        continue;
      }
      Text service = SecurityUtil.buildTokenService(NetUtils.createSocketAddr(alias));
      for (Token<?> token : creds.getAllTokens()) {
        if (HDFS_TOKEN.equals(token.getKind()) && service.equals(token.getService())
            && !service.toString().equals(alias)) {
          Token<?> copy = new Token<>(token);
          copy.setService(new Text(alias));
          creds.addToken(new Text(alias), copy);
          added.add(alias);
        }
      }
    }
    return added;
  }

  /** host:port of an hdfs:// URI with a NameNode's address; null for another scheme or a nameservice. */
  static String hostAlias(URI uri, Configuration conf) {
    if (!"hdfs".equals(uri.getScheme()) || uri.getHost() == null
        || conf.get("dfs.ha.namenodes." + uri.getHost()) != null) {
      return null;
    }
    int port = uri.getPort() > 0 ? uri.getPort() : NAMENODE_DEFAULT_PORT;
    return uri.getHost() + ":" + port;
  }
}
