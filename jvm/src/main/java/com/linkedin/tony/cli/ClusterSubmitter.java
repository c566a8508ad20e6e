package com.linkedin.tony.cli;

/**
 * TonY's entry point name, so existing `hadoop jar` / `java -cp … ClusterSubmitter` / Dataproc
 * `--class` command lines run TonY-py after swapping only the jar. A fresh implementation: it is
 * io.tonypy.cli.Submit under TonY's name.
 */
public final class ClusterSubmitter {
  private ClusterSubmitter() {}

  public static void main(String[] args) {
    io.tonypy.cli.Submit.main(args);
  }
}
