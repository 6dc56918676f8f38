#include "ckpt/skeleton_file.hpp"

#include <cstdint>
#include <mutex>

#include "core/error.hpp"

namespace st::h5 {
namespace {

// The driver: every callback passes to a sec2 file opened through HDF5's public driver API,
// except raw-data writes while the flag in the driver info is set.
struct DriverInfo {
  const bool* skip_raw_data = nullptr;
};

struct SkeletonDriverFile {
  H5FD_t public_part;  // HDF5 fills this in; it must come first
  H5FD_t* inner = nullptr;
  const bool* skip_raw_data = nullptr;
};

SkeletonDriverFile* self(H5FD_t* f) { return reinterpret_cast<SkeletonDriverFile*>(f); }
const SkeletonDriverFile* self(const H5FD_t* f) { return reinterpret_cast<const SkeletonDriverFile*>(f); }

void* info_copy(const void* info) { return new DriverInfo(*static_cast<const DriverInfo*>(info)); }
herr_t info_free(void* info) {
  delete static_cast<DriverInfo*>(info);
  return 0;
}
void* info_get(H5FD_t* f) { return new DriverInfo{self(f)->skip_raw_data}; }

H5FD_t* open_file(const char* name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  const auto* info = static_cast<const DriverInfo*>(H5Pget_driver_info(fapl));
  if (!info) return nullptr;
  const hid_t sec2 = H5Pcreate(H5P_FILE_ACCESS);
  if (sec2 < 0) return nullptr;
  H5FD_t* inner = H5Pset_fapl_sec2(sec2) < 0 ? nullptr : H5FDopen(name, flags, sec2, maxaddr);
  H5Pclose(sec2);
  if (!inner) return nullptr;
  auto* f = new SkeletonDriverFile{};
  f->inner = inner;
  f->skip_raw_data = info->skip_raw_data;
  return &f->public_part;
}

herr_t close_file(H5FD_t* f) {
  const herr_t status = H5FDclose(self(f)->inner);
  delete self(f);
  return status;
}

int compare(const H5FD_t* a, const H5FD_t* b) { return H5FDcmp(self(a)->inner, self(b)->inner); }

herr_t query(const H5FD_t* f, unsigned long* flags) {
  if (!f) {  // asked before any file is open: what sec2 offers
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
    return 0;
  }
  return H5FDquery(self(f)->inner, flags) < 0 ? -1 : 0;
}

haddr_t get_eoa(const H5FD_t* f, H5FD_mem_t type) { return H5FDget_eoa(self(f)->inner, type); }
herr_t set_eoa(H5FD_t* f, H5FD_mem_t type, haddr_t addr) { return H5FDset_eoa(self(f)->inner, type, addr); }
haddr_t get_eof(const H5FD_t* f, H5FD_mem_t type) { return H5FDget_eof(self(f)->inner, type); }
herr_t get_handle(H5FD_t* f, hid_t fapl, void** handle) { return H5FDget_vfd_handle(self(f)->inner, fapl, handle); }

herr_t read(H5FD_t* f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void* buffer) {
  return H5FDread(self(f)->inner, type, dxpl, addr, size, buffer);
}

herr_t write(H5FD_t* f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void* buffer) {
  if (type == H5FD_MEM_DRAW && *self(f)->skip_raw_data) return 0;
  return H5FDwrite(self(f)->inner, type, dxpl, addr, size, buffer);
}

herr_t flush(H5FD_t* f, hid_t dxpl, hbool_t closing) { return H5FDflush(self(f)->inner, dxpl, closing); }
// At close HDF5 truncates the file to its allocated end: the skipped chunks become a hole of
// the right size.
herr_t truncate(H5FD_t* f, hid_t dxpl, hbool_t closing) { return H5FDtruncate(self(f)->inner, dxpl, closing); }
herr_t lock(H5FD_t* f, hbool_t rw) { return H5FDlock(self(f)->inner, rw); }
herr_t unlock(H5FD_t* f) { return H5FDunlock(self(f)->inner); }

H5FD_class_t make_class() {
  H5FD_class_t c{};  // fields set by name: their order and number differ between HDF5 releases
#if H5_VERSION_GE(1, 13, 2)
  // HDF5 1.14 versions the class and wants a value; 256-511 are for drivers not registered with
  // The HDF Group. (Written for 1.14; built and tested here against 1.10.)
  c.version = H5FD_CLASS_VERSION;
  c.value = static_cast<H5FD_class_value_t>(437);
#endif
  c.name = "shardtrain_skeleton";
  c.maxaddr = (haddr_t{1} << 63) - 1;  // as sec2: the largest off_t
  c.fc_degree = H5F_CLOSE_WEAK;
  // No superblock callbacks: the file records no driver of its own.
  c.fapl_size = sizeof(DriverInfo);
  c.fapl_get = info_get;
  c.fapl_copy = info_copy;
  c.fapl_free = info_free;
  c.open = open_file;
  c.close = close_file;
  c.cmp = compare;
  c.query = query;
  c.get_eoa = get_eoa;
  c.set_eoa = set_eoa;
  c.get_eof = get_eof;
  c.get_handle = get_handle;
  c.read = read;
  c.write = write;
  c.flush = flush;
  c.truncate = truncate;
  c.lock = lock;
  c.unlock = unlock;
  const H5FD_mem_t map[] = H5FD_FLMAP_DICHOTOMY;
  for (int i = 0; i < H5FD_MEM_NTYPES; ++i) c.fl_map[i] = map[i];
  return c;
}

hid_t driver_id() {
  static const H5FD_class_t driver_class = make_class();
  static hid_t id = H5I_INVALID_HID;
  static std::once_flag once;
  std::call_once(once, [] { id = H5FDregister(&driver_class); });
  return check(id, "registering the checkpoint layout driver");
}

}  // namespace

SkeletonFile::SkeletonFile(const std::string& path) : skip_(std::make_unique<bool>(false)) {
  quiet_errors();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "file access property list");
  const DriverInfo info{skip_.get()};
  check(H5Pset_driver(fapl.get(), driver_id(), &info), "checkpoint layout driver");
  file_ = Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose, "cannot create " + path);
}

}  // namespace st::h5
