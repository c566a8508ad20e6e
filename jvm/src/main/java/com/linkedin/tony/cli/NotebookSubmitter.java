package com.linkedin.tony.cli;

/**
 * TonY's notebook entry point name: `hadoop jar tony-py.jar com.linkedin.tony.cli.NotebookSubmitter …`
 * (or `java -cp … NotebookSubmitter`) runs `tony notebook` with the same flags: JupyterLab, or the
 * command given with --executes, in one YARN container, relayed to a local port. A fresh
 * implementation: the jar's driver (io.tonypy.cli.Submit) running the notebook's Python client.
 */
public final class NotebookSubmitter {
  private NotebookSubmitter() {}

  public static void main(String[] args) {
    io.tonypy.cli.Submit.notebookMain(args);
  }
}
