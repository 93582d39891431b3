# run_installed.cmake: installs the components libmodelgate and
# libmodelgate-java of BUILD into a fresh PREFIX, then runs ModelGateTest
# with only the installed jar (and the test's own jar) on the class path and
# no modelgate.jni.library property: the jar must find its JNI library, and
# the JNI library libmodelgate.so.0, in the installed layout alone.
#   cmake -DBUILD=.. -DPREFIX=.. -DLIBDIR=.. -DDATADIR=.. -DJAVA=.. -DTEST_JAR=..
#         -DMODELGATE=.. -DWORK=.. -P run_installed.cmake
file(REMOVE_RECURSE ${PREFIX})
foreach(component libmodelgate libmodelgate-java)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX}
                          --component ${component}
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install --component ${component}: ${rc}")
  endif()
endforeach()
set(jar ${PREFIX}/${DATADIR}/java/modelgate.jar)
set(jni ${PREFIX}/${LIBDIR}/libmodelgate_jni.so)
set(lib ${PREFIX}/${LIBDIR}/libmodelgate.so.0)
foreach(f ${jar} ${jni} ${lib})
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
# LD_LIBRARY_PATH and java.library.path are cleared: only the installed
# layout can lead to the libraries.
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
                        ${JAVA} -Xcheck:jni --add-opens java.base/java.nio=ALL-UNNAMED
                        -Djava.library.path=/nonexistent
                        -Dmodelgate.test.expect=${jni},${lib}
                        -cp ${jar}:${TEST_JAR} ModelGateTest ${MODELGATE} ${WORK}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ModelGateTest on the installed jar: exit ${rc}")
endif()
