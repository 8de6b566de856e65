# --- Software: the Python environment that holds hpcdl, TensorFlow and Horovod ---------------------
cd {{workdir}}
{{activate}}
