package io.tonypy.bridge;

import java.io.IOException;
import java.net.InetSocketAddress;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.SecurityUtil;
import org.apache.hadoop.yarn.conf.YarnConfiguration;

/** Who renews a job's delegation tokens: the ResourceManager, by its principal (_HOST resolved). */
public final class Renewer {
  private Renewer() {}

  public static String rmPrincipal(Configuration conf) throws IOException {
    InetSocketAddress rm =
        conf.getSocketAddr(
            YarnConfiguration.RM_ADDRESS, YarnConfiguration.DEFAULT_RM_ADDRESS, YarnConfiguration.DEFAULT_RM_PORT);
    String pattern = conf.get(YarnConfiguration.RM_PRINCIPAL);
    if (pattern == null || pattern.isEmpty()) {
      throw new IOException(YarnConfiguration.RM_PRINCIPAL + " is not set: cannot name the renewer of the job's tokens");
    }
    return SecurityUtil.getServerPrincipal(pattern, rm.getHostName());
  }
}
