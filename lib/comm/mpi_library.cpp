#include "comm/mpi_library.hpp"

#include <mpi.h>

#include <algorithm>
#include <vector>

#include "comm/mpi_check.hpp"

namespace st {
namespace {

// The first phrase of MPI_Get_library_version's text: the library and its version.
std::string library_name(const char* text, int length) {
  const std::string all(text, static_cast<std::size_t>(std::max(length, 0)));
  return all.substr(0, all.find_first_of(",\n"));
}

// A string MCA parameter of Open MPI ("pml", "btl", "btl_tcp_if_include") through the MPI tool
// interface: its value, "" when it is unset (the library chooses), or "?" where this MPI has no
// such control variable (another library, or a component that is not built). Unchecked on
// purpose: a missing variable is an answer, not an error.
std::string control_variable(const char* name) {
  constexpr int kName = 256;
  int index = -1;
  if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) return "?";
  char cvar_name[kName], description[1024];
  int name_length = kName, description_length = sizeof description, verbosity = 0, bind = 0, scope = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;
  if (MPI_T_cvar_get_info(index, cvar_name, &name_length, &verbosity, &type, &enumtype, description,
                          &description_length, &bind, &scope) != MPI_SUCCESS ||
      type != MPI_CHAR)
    return "?";
  MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
  int count = 0;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return "?";
  std::vector<char> value(static_cast<std::size_t>(std::max(count, 0)) + 1, '\0');
  const bool read = MPI_T_cvar_read(handle, value.data()) == MPI_SUCCESS;
  MPI_T_cvar_handle_free(&handle);
  return read ? std::string(value.data()) : "?";
}

std::string setting(const std::string& value) { return value.empty() ? "the library's choice" : value; }

}  // namespace

MpiLibrary describe_mpi_library() {
  MpiLibrary library;
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  ST_CHECK_MPI(MPI_Get_library_version(text, &length));
  library.name = library_name(text, length);
  ST_CHECK_MPI(MPI_Get_version(&library.major, &library.minor));
  ST_CHECK_MPI(MPI_Query_thread(&library.thread_level));
  library.threaded = library.thread_level >= MPI_THREAD_SERIALIZED;
  return library;
}

std::string mpi_library_name_if_running() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return "";
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "";
  return library_name(text, length);
}

std::string mpi_transport_settings() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return "MPI tool interface unavailable";
  const std::string pml = control_variable("pml"), btl = control_variable("btl");
  const std::string tcp_if = control_variable("btl_tcp_if_include");
  MPI_T_finalize();
  if (pml == "?" && btl == "?") return "not an Open MPI library: transport not reported";
  std::string s = "Open MPI pml " + setting(pml) + ", btl " + setting(btl);
  if (!tcp_if.empty() && tcp_if != "?") s += ", tcp on " + tcp_if;
  return s;
}

}  // namespace st
