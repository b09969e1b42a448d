"""Slurm as a launch target: a job submitted through the cluster's login node.

Between the transport and the supervisor, with no backend knowledge: `script` renders the batch
script from argv lists, `jobstate` reads Slurm's answers (scontrol, squeue, sacct, the job
completion record) and maps job states to what the cockpit shows, and `steps` runs commands
on the job's nodes as `srun --overlap` steps. The stdlib program run on the login node and its
client are in cockpit/remote (programs/loginside.py, login.py). The Supervisor's Slurm target
(cockpit/supervisor/targets/slurm.py) composes them; nothing here imports the supervisor.
"""
