# Stop 91 probe (not product code); run from the repository root.
import sys
sys.path.insert(0, "results/libreoffice_en_de_zen3_stop86")
exec(open("results/libreoffice_en_de_xeon_stop91/steppieces.py").read().split("numba.set_num_threads(2)")[0])
def size(t):
    if isinstance(t, np.ndarray): return t.nbytes
    if isinstance(t, (tuple, list)): return sum(size(u) for u in t)
    return 0
print("reader products", [(p.dtype, p.shape, p.nbytes) for p in reader[2][0]][:6])
print("head products", [(p.dtype, p.shape, p.nbytes) for p in layer_weights[0]][:6])
print("bytes: reader weights", size(reader[2]), "head weights", size(layer_weights), "fuse", size(fuse), "output", size(output), "memory", size(memory))
print("reader inputs", [(type(a), getattr(a, 'shape', None), getattr(a, 'nbytes', None)) for a in reader[0]])
print("verifier cache", [(getattr(a, 'shape', None), getattr(a, 'nbytes', None)) for a in reader[1][:2]])
print("head cache", [(getattr(a, 'shape', None), getattr(a, 'nbytes', None)) for a in cache_views[:2]])
