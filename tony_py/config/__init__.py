"""TonY configuration: layered Hadoop-XML files (layers), validated (checks, build) into a
JobSpec (spec). Import the submodules directly: the executor needs only `spec`, and loading the
validators with it would cost every container ~70 ms at start."""
